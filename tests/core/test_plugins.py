"""The plugin host: registration hooks through pluggy, attribution, contained failures,
check_pending, and the plugin trace. Plugins are small classes defined in each test."""

from __future__ import annotations

import logging

import pytest

from inferd.caches.local import create_local_cache
from inferd.contracts.errors import InferdError
from inferd.contracts.hookspecs import BackendRegister, CacheRegister, hookimpl
from inferd.host.plugins import DEFAULT_PLUGINS, TRACE_ENV, PluginHost
from inferd.host.serve_command import _print_plugins
from inferd.testing import IdentityBackend

BUILT_INS = {name for name, _ in DEFAULT_PLUGINS}


def host(*plugins: object, trace: bool | None = False) -> PluginHost:
    """A host with exactly ``plugins`` (no built-in, no entry point)."""
    return PluginHost(load_entrypoints=False, plugins=plugins, disabled=BUILT_INS, trace=trace)


def backend_plugin(name: str, *backends: str, calls: list[str] | None = None) -> object:
    """A plugin object named ``name`` that registers ``backends`` (factories return the name)."""

    def inferd_register_backends(register: BackendRegister) -> None:
        if calls is not None:
            calls.append(name)
        for backend in backends:
            register(backend, IdentityBackend, model_filenames=(f"model.{backend}",))

    return type(name, (), {"inferd_register_backends": staticmethod(hookimpl(inferd_register_backends))})()


class Failing:
    @hookimpl
    def inferd_register_backends(self, register: BackendRegister) -> None:
        register("early", IdentityBackend)
        raise RuntimeError("cannot find my framework")


def test_registration_runs_through_pm_hook_so_a_wrapper_runs_once_around_all():
    """A new-style wrapper runs before and after every implementation, once, and sees the result."""
    calls: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def inferd_register_backends(self, register: BackendRegister):
            calls.append("before")
            result = yield
            calls.append(f"after {result}")
            return result

    h = host(backend_plugin("Alpha", "alpha", calls=calls), Wrapper(), backend_plugin("Beta", "beta", calls=calls))
    assert h.backends.names() == ["alpha", "beta"]
    assert calls == ["before", "Beta", "Alpha", "after []"]  # pluggy calls the last registered first


def test_an_old_style_hookwrapper_gets_the_outcome():
    """hookwrapper=True works too: it receives pluggy's Result after the implementations ran."""
    outcomes: list[object] = []

    class OldWrapper:
        @hookimpl(hookwrapper=True)
        def inferd_register_backends(self, register: BackendRegister):
            outcome = yield
            outcomes.append(outcome.get_result())

    h = host(backend_plugin("Alpha", "alpha"), OldWrapper())
    assert h.backends.names() == ["alpha"]
    assert outcomes == [[]]


def test_each_name_is_attributed_to_the_plugin_whose_hook_registered_it():
    """Names registered by plain implementations and by a wrapper (before and after its yield)."""

    class Aliases:
        @hookimpl(wrapper=True)
        def inferd_register_backends(self, register: BackendRegister):
            register("first", IdentityBackend)
            result = yield
            register("last", IdentityBackend)
            return result

    h = host(backend_plugin("Alpha", "alpha", "alpha2"), Aliases(), backend_plugin("Beta", "beta"))
    assert {r.name: r.plugin for r in h.backends} == {
        "alpha": "Alpha", "alpha2": "Alpha", "beta": "Beta", "first": "Aliases", "last": "Aliases",
    }  # fmt: skip
    infos = {i.name: i.registers for i in h.plugin_infos()}
    assert infos == {"Alpha": {"backend": ["alpha", "alpha2"]}, "Aliases": {"backend": ["first", "last"]},
                     "Beta": {"backend": ["beta"]}}  # fmt: skip
    assert h.backends.get("alpha").options == {"model_filenames": ("model.alpha",)}


def test_a_plugin_failing_in_its_hook_stops_no_other_plugin(caplog, capsys):
    """Logged at ERROR, reported by `inferd plugins` (exit 1); the others and a wrapper still run."""
    after: list[bool] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def inferd_register_backends(self, register: BackendRegister):
            result = yield
            after.append(True)
            return result

    with caplog.at_level(logging.ERROR, logger="inferd.host.plugins"):
        h = host(backend_plugin("Alpha", "alpha"), Failing(), Wrapper(), backend_plugin("Beta", "beta"))
        names = h.backends.names()
    assert names == ["alpha", "beta", "early"]  # what it registered before raising is kept
    assert after == [True]
    message = "plugin 'Failing' failed in inferd_register_backends: cannot find my framework"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.ERROR, message)]
    assert _print_plugins(h) == 1
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["Failing"].endswith("backend: early  ERROR: RuntimeError: cannot find my framework")
    assert "ERROR" not in lines["Alpha"] and "backend: alpha" in lines["Alpha"]


@pytest.mark.parametrize("where", ["before", "after", "no-yield"])
def test_a_failing_hook_wrapper_stops_no_other_plugin(where):
    """A wrapper raising before or after its yield, or not yielding, is reported; the call goes on."""

    class BadWrapper:
        @hookimpl(wrapper=True)
        def inferd_register_backends(self, register: BackendRegister):
            if where == "before":
                raise ValueError("broken before")
            if where == "no-yield":
                return []
            result = yield
            raise ValueError(f"broken {where}")
            return result

    h = host(backend_plugin("Alpha", "alpha"), BadWrapper(), backend_plugin("Beta", "beta"))
    assert h.backends.names() == ["alpha", "beta"]
    expected = "RuntimeError: hook wrapper did not yield" if where == "no-yield" else f"ValueError: broken {where}"
    assert h.infos["BadWrapper"].error == expected
    assert h.infos["Alpha"].error == h.infos["Beta"].error == ""


def test_two_plugins_registering_one_name_the_later_registered_is_refused():
    """Whatever pluggy's call order, the first registered plugin keeps the name; the other loses the
    rest of that hook's registrations (as if register had raised) and keeps the ones before."""
    h = host(backend_plugin("Alpha", "shared", "alpha"), backend_plugin("Beta", "beta", "shared", "after"))
    assert {r.name: r.plugin for r in h.backends} == {"shared": "Alpha", "alpha": "Alpha", "beta": "Beta"}
    assert h.infos["Beta"].error == (
        "InferdError: backend 'shared' is registered by two plugins: 'Alpha' and 'Beta'; "
        "block one with INFERD_DISABLE_PLUGINS"
    )
    assert h.infos["Beta"].registers == {"backend": ["beta"]}


def test_a_plugin_registering_a_name_twice_is_listed_once():
    """The plugin's own second registration replaces the first."""
    h = host(backend_plugin("Alpha", "alpha", "alpha"))
    assert h.infos["Alpha"].registers == {"backend": ["alpha"]}
    assert h.infos["Alpha"].error == ""


def test_a_misspelled_hook_is_reported_and_its_plugin_left_out(caplog):
    """check_pending at start-up: logged at ERROR naming the plugin, the hook and the spec it
    resembles; the plugin's other hooks do not run; the other plugins are untouched."""

    class Typo:
        @hookimpl
        def inferd_register_backend(self, register: BackendRegister) -> None:
            register("never", IdentityBackend)

        @hookimpl
        def inferd_register_caches(self, register: CacheRegister) -> None:
            register("typo_cache", create_local_cache)

    with caplog.at_level(logging.ERROR, logger="inferd.host.plugins"):
        h = host(Typo(), backend_plugin("Alpha", "alpha"))
    message = (
        "plugin 'Typo' implements unknown hook 'inferd_register_backend' "
        "(did you mean 'inferd_register_backends'?); the plugin is left out"
    )
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.ERROR, message)]
    assert h.infos["Typo"].error == message
    assert h.pm.get_plugin("Typo") is None
    assert h.caches.names() == [] and h.backends.names() == ["alpha"]


def test_an_optional_hook_with_no_spec_is_allowed():
    """optionalhook=True is pluggy's way to implement a hook a host may not have: no error."""

    class Optional:
        @hookimpl(optionalhook=True)
        def inferd_some_future_hook(self) -> None: ...

    h = host(Optional())
    assert h.infos["Optional"].error == ""
    assert h.pm.get_plugin("Optional") is not None


def test_register_outside_its_hook_is_refused():
    """register keeps nothing once the registration hook returned (the registries are filled)."""
    kept: list[BackendRegister] = []

    class Keeper:
        @hookimpl
        def inferd_register_backends(self, register: BackendRegister) -> None:
            kept.append(register)

    h = host(Keeper())
    assert h.backends.names() == []
    with pytest.raises(InferdError, match="register was called after inferd_register_backends returned"):
        kept[0]("late", IdentityBackend)
    assert h.backends.names() == []


def test_trace_logs_pluggys_hook_trace_and_who_registered_what(caplog, monkeypatch):
    """INFERD_TRACE_PLUGINS=1 (or trace=True) writes pluggy's trace to the inferd.host.plugins.trace logger."""
    monkeypatch.setenv(TRACE_ENV, "1")
    with caplog.at_level(logging.INFO, logger="inferd.host.plugins.trace"):
        host(backend_plugin("Alpha", "alpha"), trace=None).backends.names()
    lines = [r.getMessage() for r in caplog.records if r.name == "inferd.host.plugins.trace"]
    assert lines[:3] == [
        "  inferd_register_backends [hook]\n      register: <register backend>",
        "  backend 'alpha' registered by plugin 'Alpha' [register]",
        "  finish inferd_register_backends --> [] [hook]",
    ]
    caplog.clear()
    monkeypatch.setenv(TRACE_ENV, "0")
    with caplog.at_level(logging.INFO, logger="inferd.host.plugins.trace"):
        host(backend_plugin("Alpha", "alpha"), trace=None).backends.names()
    assert [r for r in caplog.records if r.name == "inferd.host.plugins.trace"] == []
