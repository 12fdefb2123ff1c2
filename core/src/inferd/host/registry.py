"""Named factories registered by plugins (backends, schedulers, caches, frontends): the host fills
one registry per kind from the registration hooks (plugins see only the typed ``register``
callables of :mod:`inferd.contracts.hookspecs`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from inferd.contracts.errors import InferdError, NotFound

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Registration(Generic[T]):
    """One registered factory, the plugin that registered it, and what it said about itself."""

    name: str
    factory: Callable[..., T]
    plugin: str
    #: Keyword options given to ``register`` (e.g. a backend's ``model_filenames``).
    options: Mapping[str, object] = field(default_factory=dict)


class Registry(Generic[T]):
    """Factories of one kind, by name.

    Two plugins registering one name is an error; a plugin registering a name again replaces its
    own registration. ``options`` are the keyword options ``register`` accepts for this kind.
    """

    def __init__(self, kind: str, options: Iterable[str] = ()) -> None:
        self.kind = kind
        self.accepted_options = tuple(options)
        self._items: dict[str, Registration[T]] = {}

    def add(self, name: str, factory: Callable[..., T], plugin: str, **options: object) -> None:
        """Register ``factory`` as ``name`` for ``plugin``; raises :class:`InferdError` on a conflict."""
        unknown = sorted(set(options) - set(self.accepted_options))
        if unknown:
            accepted = ", ".join(self.accepted_options) or "none"
            raise InferdError(
                f"plugin '{plugin}' registers {self.kind} '{name}' with unknown option(s) "
                f"{', '.join(repr(o) for o in unknown)}; a {self.kind} accepts: {accepted}"
            )
        existing = self._items.get(name)
        if existing is not None and existing.plugin != plugin:
            raise InferdError(
                f"{self.kind} '{name}' is registered by two plugins: "
                f"'{existing.plugin}' and '{plugin}'; block one with INFERD_DISABLE_PLUGINS"
            )
        self._items[name] = Registration(name, factory, plugin, dict(options))

    def get(self, name: str) -> Registration[T]:
        """The registration of ``name``; :class:`NotFound` lists the names there are."""
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
        """Registrations in the order their names were first registered."""
        return iter(self._items.values())

    def names(self) -> list[str]:
        return sorted(self._items)

    def create(self, name: str, *args: object) -> T:
        """Call the factory registered as ``name`` with ``args``."""
        return self.get(name).factory(*args)
