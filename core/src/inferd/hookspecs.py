"""The hooks by which plugins extend inferd.

Hooks are for wiring, not for the request path: each ``inferd_register_*`` hook runs once when a
server is built and receives a ``register(name, factory)`` callable. The factory is called when a
model (or the server) needs the piece, so discovering a plugin never imports its framework.

A plugin is a module or object with functions marked ``@hookimpl``; a distribution exposes it
through the ``inferd`` entry-point group::

    [project.entry-points.inferd]
    onnxruntime = "inferd_backend_onnx.hooks"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import argparse

    from inferd.server import Server

PROJECT = "inferd"
hookspec = pluggy.HookspecMarker(PROJECT)
#: Mark plugin functions with ``@hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[..., None]
"""``register(name, factory, **options)``, handed to every ``inferd_register_*`` hook."""


@hookspec
def inferd_register_backends(register: Register) -> None:
    """Register backend factories.

    Called once per server, at start-up. ``register(name, factory)``: ``name`` is what a
    config.pbtxt puts in ``backend:`` (Triton's ``platform`` strings map to backend names through
    Triton's own table: ``onnxruntime_onnx`` -> ``onnxruntime``...); ``factory()`` takes no argument and returns an :class:`inferd.backend.Backend`.
    It is called the first time a model needs the backend. A keyword option
    ``model_filenames=("model.onnx", ...)`` names the files that identify the backend's models, so
    a model whose config names no backend is matched without importing every framework.
    Returns nothing.
    """


@hookspec
def inferd_register_schedulers(register: Register) -> None:
    """Register scheduler factories.

    Called once per server, at start-up. ``register(name, factory)``: core picks ``direct``,
    ``dynamic``, ``sequence`` or ``ensemble`` from a model's scheduling choice;
    ``factory(context)`` receives the :class:`inferd.scheduler.SchedulerContext` of the version
    being loaded (its name, version, config, instance runners; a way to call other models) and
    returns an :class:`inferd.scheduler.Scheduler`. A scheduler only decides what runs where and
    when (``await runner.run(batch)``): core records the statistics and traces. Returns nothing.
    """


@hookspec
def inferd_register_caches(register: Register) -> None:
    """Register response-cache factories.

    Called once per server, at start-up. ``register(name, factory)``: ``name`` is what
    ``--cache-config NAME,key=value`` selects; ``factory(settings: dict[str, str])`` returns an
    :class:`inferd.cache.ResponseCache`. Returns nothing.
    """


@hookspec
def inferd_register_frontends(register: Register) -> None:
    """Register frontend factories.

    Called once per server, at start-up. ``register(name, factory)``: ``factory(options)``
    receives the :class:`inferd.server.ServerOptions` and returns an
    :class:`inferd.frontend.Frontend`, or ``None`` when the options turn it off. Returns nothing.
    """


@hookspec
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    """Add command-line options to ``inferd serve``.

    Called once when the CLI builds its parser. Values reach frontends and other plugins through
    ``ServerOptions.extra`` (the parsed namespace as a dict). Returns nothing.
    """


@hookspec
def inferd_startup(server: Server) -> None:
    """Called once the server's models are loaded and its frontends are about to serve."""


@hookspec
def inferd_shutdown(server: Server) -> None:
    """Called once when the server stops, after frontends closed and models unloaded."""
