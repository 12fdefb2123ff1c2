"""A model's config ``parameters`` read as typed values.

Triton stores every parameter as a string (``parameters { key: "x" value { string_value: "1" } }``);
backends read them as flags, integers and numbers. Errors name the model, the key and the value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from inferd.contracts.errors import ConfigError

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class ModelParameters(Mapping[str, str]):
    """``config.parameters`` as ``{key: string}`` with typed getters."""

    def __init__(self, config: Any, model: str | None = None) -> None:
        self.model = model or config.name
        self._values = {key: value.string_value for key, value in config.parameters.items()}

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def flag(self, key: str, default: T) -> bool | T:
        """``true``/``1``/``yes``/``on`` or ``false``/``0``/``no``/``off``; ``default`` when absent."""
        if key not in self._values:
            return default
        text = self._values[key].strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"model '{self.model}': parameter {key} must be true or false, got '{self._values[key]}'")

    def integer(self, key: str, default: T) -> int | T:
        if key not in self._values:
            return default
        try:
            return int(self._values[key].strip())
        except ValueError:
            raise ConfigError(
                f"model '{self.model}': parameter {key} must be an integer, got '{self._values[key]}'"
            ) from None

    def number(self, key: str, default: T) -> float | T:
        if key not in self._values:
            return default
        try:
            return float(self._values[key].strip())
        except ValueError:
            raise ConfigError(
                f"model '{self.model}': parameter {key} must be a number, got '{self._values[key]}'"
            ) from None
