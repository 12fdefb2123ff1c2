"""Named factories registered by plugins (backends, schedulers, caches, frontends)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from inferd.errors import InferdError, NotFound

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Registration(Generic[T]):
    """One registered factory, the plugin that registered it, and what it said about itself."""

    name: str
    factory: Callable[..., T]
    plugin: str
    #: Keyword options given to ``register`` (e.g. a backend's ``model_filenames``).
    options: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Factories of one kind, by name. Two plugins registering one name is an error."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Registration[T]] = {}

    def add(self, name: str, factory: Callable[..., T], plugin: str, **options: Any) -> None:
        existing = self._items.get(name)
        if existing is not None and existing.plugin != plugin:
            raise InferdError(
                f"{self.kind} '{name}' is registered by two plugins: "
                f"'{existing.plugin}' and '{plugin}'; block one with INFERD_DISABLE_PLUGINS"
            )
        self._items[name] = Registration(name, factory, plugin, options)

    def get(self, name: str) -> Registration[T]:
        try:
            return self._items[name]
        except KeyError:
            raise NotFound(
                f"no installed plugin provides the {self.kind} '{name}'; "
                f"installed: {', '.join(sorted(self._items)) or 'none'}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[Registration[T]]:
        return iter(self._items.values())

    def names(self) -> list[str]:
        return sorted(self._items)

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.get(name).factory(*args, **kwargs)
