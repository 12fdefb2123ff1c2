"""``--capture-config``: the settings of request capture, read from a YAML or JSON file and checked
field by field (docs/traffic.md, "Capture"); :mod:`inferd.engine.capture` writes what they select."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: What a redacted parameter's value is written as.
REDACTED = "<redacted>"
_KEYS = {"dir", "rate", "models", "tensors", "max_file_bytes", "max_files", "queue", "redact", "tenants"}
_REDACT_KEYS = {"inputs", "outputs", "parameters"}


class CaptureConfigError(Exception):
    """A ``--capture-config`` file that cannot be used (the message names the file and the field)."""


@dataclass(frozen=True)
class CaptureConfig:
    """``--capture-config``: where, how much, what, and what never to write."""

    dir: Path
    #: The share of requests captured, 0 to 1.
    rate: float = 0.01
    #: Only these models (empty: every model).
    models: frozenset[str] = frozenset()
    #: Only these tensors, inputs and outputs by name (empty: every tensor).
    tensors: frozenset[str] = frozenset()
    #: A file is closed and the next one opened past this size; at most ``max_files`` are kept.
    max_file_bytes: int = 64 << 20
    max_files: int = 10
    #: Records waiting for the writer at most; beyond, a sampled request is dropped (and counted).
    queue: int = 10_000
    redact_inputs: frozenset[str] = frozenset()
    redact_outputs: frozenset[str] = frozenset()
    redact_parameters: frozenset[str] = frozenset()
    #: Tenants switched on or off by name (``--auth-config``); a tenant not named is captured.
    tenants: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> CaptureConfig:
        """Read and check a capture config file (YAML, or JSON when it ends in ``.json``)."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise CaptureConfigError(f"{path}: cannot read the capture config: {exc.strerror}") from None
        try:
            if path.suffix.lower() == ".json":
                raw = json.loads(text)
            else:
                import yaml

                raw = yaml.safe_load(text)
        except Exception as exc:  # JSON or YAML syntax: the parser's own words
            raise CaptureConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None
        return cls.from_mapping(raw, str(path))

    @classmethod
    def from_mapping(cls, raw: Any, where: str = "capture config") -> CaptureConfig:
        if not isinstance(raw, dict):
            raise CaptureConfigError(f"{where}: must be a mapping with at least 'dir'")
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            raise CaptureConfigError(f"{where}: unknown field '{unknown[0]}'; known: {', '.join(sorted(_KEYS))}")
        if not isinstance(raw.get("dir"), str) or not raw["dir"]:
            raise CaptureConfigError(f"{where}: 'dir' (the directory capture files go to) must be a path")
        rate = raw.get("rate", 0.01)
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise CaptureConfigError(f"{where}: 'rate' must be a number from 0 to 1 (0.01: 1 %), got {rate!r}")
        numbers = {}
        for key, least in (("max_file_bytes", 1024), ("max_files", 1), ("queue", 1)):
            value = raw.get(key, getattr(cls, key))
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise CaptureConfigError(f"{where}: '{key}' must be an integer >= {least}, got {value!r}")
            numbers[key] = value
        redact = raw.get("redact") or {}
        if not isinstance(redact, dict) or set(redact) - _REDACT_KEYS:
            raise CaptureConfigError(f"{where}: 'redact' must map inputs / outputs / parameters to lists of names")
        tenants = raw.get("tenants") or {}
        if not isinstance(tenants, dict) or not all(isinstance(v, bool) for v in tenants.values()):
            raise CaptureConfigError(f"{where}: 'tenants' must map tenant names to true or false")
        return cls(
            dir=Path(raw["dir"]),
            rate=float(rate),
            models=_names(raw.get("models"), "models", where),
            tensors=_names(raw.get("tensors"), "tensors", where),
            redact_inputs=_names(redact.get("inputs"), "redact.inputs", where),
            redact_outputs=_names(redact.get("outputs"), "redact.outputs", where),
            redact_parameters=frozenset(
                n.lower() for n in _names(redact.get("parameters"), "redact.parameters", where)
            ),
            tenants={str(k): v for k, v in tenants.items()},
            **numbers,
        )


def _names(value: Any, key: str, where: str) -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CaptureConfigError(f"{where}: '{key}' must be a list of names")
    return frozenset(value)
