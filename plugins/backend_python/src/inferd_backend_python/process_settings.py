"""How an isolated model's instances run: the settings its config's ``parameters`` give.

A model whose config sets ``parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }``
(or an ``EXECUTION_ENV_PATH``) runs each instance in a stub process of its own
(:class:`~inferd_backend_python.process_model.ProcessModel`); its other parameters bound that
process: ``EXECUTE_TIMEOUT_SECS``, ``MEMORY_LIMIT``, ``CPU_AFFINITY``, ``RESTART_LIMIT`` and
``RESTART_WINDOW_SECS``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.api import InvalidArgument
from inferd_backend_python import env as environments
from inferd_backend_python.archive import Limits

if TYPE_CHECKING:
    from inferd.api import ModelConfig


@dataclass(frozen=True)
class Settings:
    """How an isolated model's instances run, from its config's ``parameters``."""

    env_path: Path | None = None
    env_limits: Limits = Limits()
    execute_timeout_s: float | None = None
    memory_limit: int | None = None
    cpus: tuple[int, ...] = ()
    restart_limit: int = 5
    restart_window_s: float = 60.0


def _parameter(config: ModelConfig, key: str) -> str | None:
    param = config.parameters.get(key) if key in config.parameters else None
    return param.string_value.strip() if param is not None else None


def isolation_settings(
    config: ModelConfig, model_dir: Path, name: str, env_limits: Limits | None = None
) -> Settings | None:
    """The isolation settings of a model, or None when it runs in the server process."""
    mode = _parameter(config, "EXECUTION_MODE")
    env_value = _parameter(config, "EXECUTION_ENV_PATH")
    label = f"model '{name}'"
    if mode not in (None, "", "in_process", "process"):
        raise InvalidArgument(f"{label}: parameter EXECUTION_MODE is '{mode}'; expected 'in_process' or 'process'")
    if mode == "in_process" and env_value:
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH needs EXECUTION_MODE 'process' (or no EXECUTION_MODE)")
    if mode != "process" and not env_value:
        return None
    return Settings(
        env_path=environments.resolve(env_value, model_dir) if env_value else None,
        env_limits=env_limits or Limits(),
        execute_timeout_s=_number(config, "EXECUTE_TIMEOUT_SECS", label, float) or None,
        memory_limit=_size(_parameter(config, "MEMORY_LIMIT"), label),
        cpus=_cpus(_parameter(config, "CPU_AFFINITY"), label),
        restart_limit=int(_number(config, "RESTART_LIMIT", label, int, 5)),
        restart_window_s=float(_number(config, "RESTART_WINDOW_SECS", label, float, 60.0)),
    )


def _number(config: ModelConfig, key: str, label: str, kind: type[int] | type[float], default: float = 0.0) -> float:
    text = _parameter(config, key)
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if value < 0 or (kind is int and value < 1):
        raise InvalidArgument(f"{label}: parameter {key} is '{text}'; expected a positive {kind.__name__}")
    return value


def _size(text: str | None, label: str) -> int | None:
    if not text:
        return None
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text, re.IGNORECASE)
    if match is None or int(match.group(1)) == 0:
        raise InvalidArgument(
            f"{label}: parameter MEMORY_LIMIT is '{text}'; expected bytes, or a number with K, M or G"
        )
    return int(match.group(1)) << (10 * " KMG".index((match.group(2) or " ").upper()))


def _cpus(text: str | None, label: str) -> tuple[int, ...]:
    if not text:
        return ()
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise InvalidArgument(
            f"{label}: parameter CPU_AFFINITY is '{text}'; expected CPU numbers like '0,2-3'"
        ) from None
    unknown = cpus - os.sched_getaffinity(0)
    if unknown:
        raise InvalidArgument(f"{label}: parameter CPU_AFFINITY names CPUs this server may not use: {sorted(unknown)}")
    return tuple(sorted(cpus))
