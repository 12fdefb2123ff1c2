"""The registry of named factories: conflicts, re-registration, unknown names, options."""

from __future__ import annotations

import pytest

from inferd.contracts.errors import ErrorKind, InferdError, NotFound
from inferd.host.registry import Registry


def make_a() -> str:
    return "a"


def make_b() -> str:
    return "b"


def test_a_name_from_two_plugins_is_refused_naming_both():
    """The first plugin keeps the name; the error names the kind, the name and both plugins."""
    registry: Registry[str] = Registry("scheduler")
    registry.add("direct", make_a, "schedulers")
    with pytest.raises(InferdError) as caught:
        registry.add("direct", make_b, "tagging")
    assert caught.value.message == (
        "scheduler 'direct' is registered by two plugins: 'schedulers' and 'tagging'; "
        "block one with INFERD_DISABLE_PLUGINS"
    )
    assert registry.get("direct").plugin == "schedulers"
    assert registry.create("direct") == "a"


def test_the_same_plugin_registering_a_name_again_replaces_its_registration():
    """Re-registration by the owner replaces the factory and keeps the name's place in the order."""
    registry: Registry[str] = Registry("backend", ("model_filenames",))
    registry.add("alpha", make_a, "p", model_filenames=("model.a",))
    registry.add("beta", make_a, "p")
    registry.add("alpha", make_b, "p")
    assert [r.name for r in registry] == ["alpha", "beta"]
    assert registry.create("alpha") == "b"
    assert registry.get("alpha").options == {}


def test_an_unknown_name_lists_the_names_there_are():
    """NotFound names the kind and what is installed, sorted; 'none' for an empty registry."""
    registry: Registry[str] = Registry("backend")
    with pytest.raises(NotFound) as caught:
        registry.get("onnxruntime")
    assert caught.value.message == "no installed plugin provides the backend 'onnxruntime'; installed: none"
    registry.add("python", make_a, "python")
    registry.add("fil", make_b, "fil")
    with pytest.raises(NotFound) as caught:
        registry.create("onnxruntime")
    assert caught.value.message == "no installed plugin provides the backend 'onnxruntime'; installed: fil, python"
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert registry.names() == ["fil", "python"]
    assert "fil" in registry and "onnxruntime" not in registry


def test_options_are_kept_with_the_registration():
    """Keyword options given to register are kept as given, and factories get the create arguments."""
    registry: Registry[str] = Registry("backend", ("model_filenames",))
    registry.add("fil", str.upper, "fil", model_filenames=("model.txt", "xgboost.json"))
    registration = registry.get("fil")
    assert (registration.name, registration.plugin) == ("fil", "fil")
    assert registration.options == {"model_filenames": ("model.txt", "xgboost.json")}
    assert registry.create("fil", "made") == "MADE"


def test_an_option_the_kind_does_not_take_is_refused():
    """A misspelled option is an error naming the plugin, the option and what the kind accepts."""
    backends: Registry[str] = Registry("backend", ("model_filenames",))
    with pytest.raises(InferdError) as caught:
        backends.add("fil", make_a, "fil", model_filename=("model.txt",))
    assert caught.value.message == (
        "plugin 'fil' registers backend 'fil' with unknown option(s) 'model_filename'; "
        "a backend accepts: model_filenames"
    )
    caches: Registry[str] = Registry("cache")
    with pytest.raises(InferdError, match="a cache accepts: none"):
        caches.add("local", make_a, "local_cache", size=1)
    assert "fil" not in backends and "local" not in caches
