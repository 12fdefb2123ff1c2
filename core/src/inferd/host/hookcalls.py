"""Registration hooks called through pluggy, each implementation attributed to its plugin and contained.

pluggy runs a hook's implementations in one loop, stops at the first exception, and hands every
implementation the same ``register``. Registration needs two things more: ``register`` must know
which plugin is calling it (``inferd plugins`` shows who registered what), and one plugin failing
must leave the others (and the server) running. So :func:`contain` wraps each implementation of a
registration hook before it is called: the implementation runs with its plugin's name current
(what :class:`PluginRegister` records), and an exception it raises is reported to ``failed``
instead of ending the loop. Hook wrappers (``wrapper=True`` / ``hookwrapper=True``) are wrapped
step by step, so they still run once around all implementations, as pluggy documents. The
recorded calls are added to the registry once the hook returned, in plugin registration order
(:func:`call_registration_hook`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar, cast

import pluggy

from inferd.contracts.errors import InferdError
from inferd.host.registry import Registry

T = TypeVar("T")
#: ``failed(plugin, exception)``: a registration implementation of ``plugin`` raised.
Failed = Callable[[str, Exception], None]

_RUNNING: ContextVar[str] = ContextVar("inferd_running_plugin")


def _as(plugin: str, step: Callable[[], T]) -> T:
    """Run ``step`` with ``plugin`` as the plugin whose registration is running."""
    token = _RUNNING.set(plugin)
    try:
        return step()
    finally:
        _RUNNING.reset(token)


@dataclass(frozen=True)
class Registering:
    """One ``register(name, factory, **options)`` call, and the plugin that made it."""

    plugin: str
    name: str
    factory: Callable[..., object]
    options: dict[str, object]


class PluginRegister:
    """The ``register`` handed to one registration hook: records each call in the name of the plugin
    whose implementation is running; :func:`call_registration_hook` adds them to the registry."""

    def __init__(self, kind: str, trace: Callable[[str], object]) -> None:
        self.kind = kind
        self.trace = trace
        self.calls: list[Registering] = []
        self.closed = False

    def __call__(self, name: str, factory: Callable[..., object], **options: object) -> None:
        plugin = _RUNNING.get(None)
        if plugin is None or self.closed:
            raise InferdError(f"{self.kind} '{name}': register was called after inferd_register_{self.kind}s returned")
        self.calls.append(Registering(plugin, name, factory, options))
        self.trace(f"{self.kind} '{name}' registered by plugin '{plugin}'")

    def __repr__(self) -> str:
        return f"<register {self.kind}>"


def call_registration_hook(
    hook: pluggy.HookCaller, registry: Registry[T], failed: Failed, trace: Callable[[str], object]
) -> list[Registering]:
    """Call ``hook`` through pluggy (wrappers and tracing run) and fill ``registry`` from it.

    pluggy calls the last registered plugin first; the names are added in the order the plugins
    were registered (built-ins first), so when two plugins register one name the later one is
    refused, whatever the call order. A plugin whose registration is refused loses the rest of
    that hook's registrations, as if ``register`` had raised. Returns what was added.
    """
    register = PluginRegister(registry.kind, trace)
    contain(hook, failed)
    order = [impl.plugin_name for impl in hook.get_hookimpls()]
    hook(register=register)
    register.closed = True
    added, refused = [], set()
    for call in sorted(register.calls, key=lambda c: order.index(c.plugin)):
        if call.plugin in refused:
            continue
        try:
            registry.add(call.name, cast(Callable[..., T], call.factory), call.plugin, **call.options)
        except InferdError as exc:
            refused.add(call.plugin)
            failed(call.plugin, exc)
            continue
        added.append(call)
    return added


def contain(hook: pluggy.HookCaller, failed: Failed) -> None:
    """Wrap each implementation of ``hook``: run it as its plugin, report its exceptions to ``failed``."""
    for impl in hook.get_hookimpls():
        wrap = _contained_wrapper if impl.wrapper or impl.hookwrapper else _contained_call
        # pluggy types HookImpl.function Final; this per-implementation wrapper is the one place a
        # host can act between two implementations of one call (see the module docstring).
        impl.function = wrap(impl.function, impl.plugin_name, failed)  # type: ignore[misc]


def _contained_call(function: Callable[..., object], plugin: str, failed: Failed) -> Callable[..., object]:
    @functools.wraps(function)
    def call(*args: object, **kwargs: object) -> object:
        try:
            return _as(plugin, lambda: function(*args, **kwargs))
        except Exception as exc:
            failed(plugin, exc)
            return None

    return call


def _contained_wrapper(function: Callable[..., object], plugin: str, failed: Failed) -> Callable[..., object]:
    @functools.wraps(function)
    def wrapper(*args: object, **kwargs: object) -> Generator[None, object, object]:
        steps = cast(Generator[None, object, object], function(*args, **kwargs))  # pluggy checked it is one
        if not _first_step(steps, plugin, failed):
            return (yield)  # a wrapper that failed before its yield passes the call through
        try:
            sent = yield
        except BaseException:  # only what no implementation contains (e.g. KeyboardInterrupt)
            steps.close()
            raise
        return _last_step(steps, sent, plugin, failed)

    return wrapper


def _first_step(steps: Generator[None, object, object], plugin: str, failed: Failed) -> bool:
    """Run a hook wrapper up to its yield; False (and reported) when it raised or did not yield."""
    try:
        _as(plugin, lambda: next(steps))
    except StopIteration:
        failed(plugin, RuntimeError("hook wrapper did not yield"))
        return False
    except Exception as exc:
        failed(plugin, exc)
        return False
    return True


def _last_step(steps: Generator[None, object, object], sent: object, plugin: str, failed: Failed) -> object:
    """Resume a hook wrapper after its yield; returns its result, or ``sent`` when it failed."""
    try:
        _as(plugin, lambda: steps.send(sent))
    except StopIteration as stop:
        return stop.value
    except Exception as exc:
        failed(plugin, exc)
        return sent
    steps.close()
    failed(plugin, RuntimeError("hook wrapper has a second yield"))
    return sent
