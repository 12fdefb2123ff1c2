"""Typed readers of settings: Triton's boolean flag values (for the CLI and the plugins that add
``inferd serve`` options) and a backend's ``--backend-config`` settings."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from inferd.contracts.errors import ConfigError


def parse_bool(value: str) -> bool:
    """Triton's boolean flag values: ``--allow-http=false``, ``--strict-model-config=1``..."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")


def _bad_setting(backend: str, key: str, value: str, expected: str) -> ConfigError:
    return ConfigError(f"--backend-config={backend},{key}={value}: expected {expected}")


def setting_integer(settings: Mapping[str, str], backend: str, key: str, default: int, minimum: int = 0) -> int:
    """A whole-number backend setting (``default`` when absent); a clear error names the flag."""
    raw = settings.get(key)
    if raw is None:
        return default
    try:
        number = int(raw.strip())
    except ValueError:
        raise _bad_setting(backend, key, raw, "a whole number") from None
    if number < minimum:
        raise _bad_setting(backend, key, raw, f"a whole number >= {minimum}")
    return number


def setting_flag(settings: Mapping[str, str], backend: str, key: str, default: bool) -> bool:
    """A boolean backend setting (``1``/``0``, ``true``/``false``...; ``default`` when absent)."""
    raw = settings.get(key)
    if raw is None:
        return default
    try:
        return parse_bool(raw)
    except argparse.ArgumentTypeError:
        raise _bad_setting(backend, key, raw, "true or false (1 or 0)") from None
