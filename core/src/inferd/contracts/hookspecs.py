"""The hooks by which plugins extend inferd, and the typed ``register`` each registration hook gets.

Hooks are for wiring, not for the request path: each ``inferd_register_*`` hook runs once when a
server is built and receives a ``register(name, factory)`` callable typed for its kind
(:class:`BackendRegister`, :class:`SchedulerRegister`, :class:`CacheRegister`,
:class:`FrontendRegister`). The factory is called when a model (or the server) needs the piece, so
discovering a plugin never imports its framework.

A plugin is a module or object with functions marked ``@hookimpl``; a distribution exposes it
through the ``inferd`` entry-point group::

    [project.entry-points.inferd]
    onnxruntime = "inferd_backend_onnx.hooks"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

import pluggy

if TYPE_CHECKING:
    import argparse

    from inferd.contracts.backend import Backend
    from inferd.contracts.cache import ResponseCache
    from inferd.contracts.frontend import Frontend, HttpPortSettings
    from inferd.contracts.scheduler import Scheduler, SchedulerContext
    from inferd.contracts.trace import Tracer

PROJECT = "inferd"
hookspec = pluggy.HookspecMarker(PROJECT)
#: Mark plugin functions with ``@hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT)


class ServerSettings(Protocol):
    """The server options a frontend factory (and a start-up hook) reads.

    :class:`inferd.host.server.ServerOptions` is the implementation; flag names follow Triton's.
    """

    @property
    def host(self) -> str: ...
    @property
    def http_port(self) -> int: ...
    @property
    def grpc_port(self) -> int: ...
    @property
    def metrics_port(self) -> int: ...
    @property
    def allow_http(self) -> bool: ...
    @property
    def allow_grpc(self) -> bool: ...
    @property
    def allow_metrics(self) -> bool: ...
    @property
    def http(self) -> HttpPortSettings:
        """The HTTP port's settings (TLS, limits), for every frontend that serves HTTP."""
        ...

    @property
    def extra(self) -> Mapping[str, Any]:
        """Options added through ``inferd_add_options``, by argparse ``dest`` (values as argparse
        parsed them: their type is the plugin's own option's)."""
        ...


class TracedDataPlane(Protocol):
    """The part of the data plane start-up and shutdown hooks configure: request tracing."""

    @property
    def tracer(self) -> Tracer: ...


class ServerView(Protocol):
    """The running server, as :func:`inferd_startup` and :func:`inferd_shutdown` see it."""

    @property
    def options(self) -> ServerSettings: ...
    @property
    def dataplane(self) -> TracedDataPlane: ...


BackendFactory = Callable[[], "Backend"]
"""``factory()``: called once per server, the first time a model needs the backend."""

ConfiguredBackendFactory = Callable[[dict[str, str]], "Backend"]
"""``factory(settings)``, for a backend registered with ``settings=(keys...)``: called once per
server, the first time a model needs the backend, with its ``--backend-config`` settings among
those keys (``--backend-config=<key>=<value>`` for every backend, then ``<backend>,<key>=<value>``
over them). Absent keys are absent: the backend owns its defaults."""

SchedulerFactory = Callable[["SchedulerContext"], "Scheduler"]
"""``factory(context)``: called once per model version being loaded."""

CacheFactory = Callable[[dict[str, str]], "ResponseCache"]
"""``factory(settings)``: the ``--cache-config`` settings of this cache; called once at start-up."""

FrontendFactory = Callable[[ServerSettings], "Frontend | None"]
"""``factory(options)``: a frontend, or ``None`` when the options turn it off."""


class BackendRegister(Protocol):
    """The ``register`` handed to :func:`inferd_register_backends`."""

    @overload
    def __call__(
        self,
        name: str,
        factory: BackendFactory,
        *,
        model_filenames: Sequence[str] | None = None,
        single_process: bool = False,
    ) -> None: ...

    @overload
    def __call__(
        self,
        name: str,
        factory: ConfiguredBackendFactory,
        *,
        model_filenames: Sequence[str] | None = None,
        settings: Sequence[str],
        single_process: bool = False,
    ) -> None: ...

    def __call__(
        self,
        name: str,
        factory: BackendFactory | ConfiguredBackendFactory,
        *,
        model_filenames: Sequence[str] | None = None,
        settings: Sequence[str] | None = None,
        single_process: bool = False,
    ) -> None:
        """Register backend ``name``; ``model_filenames`` are the files that identify its models;
        ``settings`` the ``--backend-config`` keys it reads (its factory then takes them);
        ``single_process=True``: its models must not be loaded once per serving process, so
        ``--workers auto`` runs one process while such a model is in the repository."""


class SchedulerRegister(Protocol):
    """The ``register`` handed to :func:`inferd_register_schedulers`."""

    def __call__(self, name: str, factory: SchedulerFactory) -> None:
        """Register scheduler ``name``: a model selects it with its ``inferd_scheduler`` parameter."""


class CacheRegister(Protocol):
    """The ``register`` handed to :func:`inferd_register_caches`."""

    def __call__(self, name: str, factory: CacheFactory) -> None:
        """Register response cache ``name`` (what ``--cache-config NAME,...`` selects)."""


class FrontendRegister(Protocol):
    """The ``register`` handed to :func:`inferd_register_frontends`."""

    def __call__(self, name: str, factory: FrontendFactory) -> None:
        """Register frontend ``name``."""


@hookspec
def inferd_register_backends(register: BackendRegister) -> None:
    """Register backend factories.

    Called once per server, at start-up. ``register(name, factory, model_filenames=...)``:
    ``name`` is what a config.pbtxt puts in ``backend:`` (Triton's ``platform`` strings map to
    backend names through Triton's own table, :mod:`inferd.config.platforms`:
    ``onnxruntime_onnx`` -> ``onnxruntime``...); ``factory()`` takes no argument and returns an
    :class:`inferd.api.Backend`. It is called the first time a model needs the backend.
    ``model_filenames=("model.onnx", ...)`` names the files that identify the backend's models, so
    a model whose config names no backend is matched without importing every framework.
    ``settings=("default-max-batch-size", ...)`` names the ``--backend-config`` keys the backend
    reads; its factory is then ``factory(settings: dict[str, str])`` (:data:`ConfiguredBackendFactory`),
    and a key no backend reads gets a warning at start-up. ``single_process=True`` says a model of
    the backend holds what must not be held once per serving process (an engine owning a device,
    a cache sized to a device's memory): ``--workers auto`` then runs one process.
    Register names you own: a name another plugin registered is an error. Returns nothing.
    """


@hookspec
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    """Register scheduler factories.

    Called once per server, at start-up. ``register(name, factory)``: a model gets the scheduler
    its config parameter ``inferd_scheduler`` names, else the built-in its scheduling choice
    implies (``direct``, ``dynamic``, ``sequence`` or ``ensemble``, as in Triton);
    ``factory(context)`` receives the :class:`inferd.api.SchedulerContext` of the version
    being loaded (its name, version, config, instance runners; a way to call other models) and
    returns an :class:`inferd.api.Scheduler`. A scheduler only decides what runs where and
    when (``await runner.run(batch)``): core records the statistics and traces. Returns nothing.
    """


@hookspec
def inferd_register_caches(register: CacheRegister) -> None:
    """Register response-cache factories.

    Called once per server, at start-up. ``register(name, factory)``: ``name`` is what
    ``--cache-config NAME,key=value`` selects; ``factory(settings: dict[str, str])`` returns an
    :class:`inferd.api.ResponseCache`. Register names you own: a name another plugin registered
    is an error. Returns nothing.
    """


@hookspec
def inferd_register_frontends(register: FrontendRegister) -> None:
    """Register frontend factories.

    Called once per server, at start-up. ``register(name, factory)``: ``factory(options)``
    receives the server's options (:class:`ServerSettings`; the :class:`inferd.host.server.ServerOptions`)
    and returns an :class:`inferd.api.Frontend`, or ``None`` when the options turn it off.
    Register names you own: a name another plugin registered is an error. Returns nothing.
    """


@hookspec
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    """Add command-line options to ``inferd serve``.

    Called once when the CLI builds its parser. Values reach frontends and other plugins through
    ``ServerOptions.extra`` (the parsed namespace as a dict). Returns nothing.
    """


@hookspec
def inferd_startup(server: ServerView) -> None:
    """Called once the server's models are loaded and its frontends are about to serve.

    Raising stops the start: raise :class:`inferd.api.StartupError` for a clean message (``inferd
    serve`` prints ``error: <message>`` and exits with status 1); any other exception is reported
    with its traceback. A plugin never ends the process itself (no ``SystemExit``, no ``sys.exit``).
    """


@hookspec
def inferd_shutdown(server: ServerView) -> None:
    """Called once when the server stops, after frontends closed and models unloaded."""
