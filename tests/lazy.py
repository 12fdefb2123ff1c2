"""Modules loaded when first used, not when pytest collects the file that imports them: every xdist
worker collects every test file, so a heavy import at the top of one (torch, openai, boto3, moto) cost
each worker its CPU, even the workers that never run that file."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

#: Attributes pytest and its plugins look up on every object a test module holds as they collect it:
#: ``__class__`` (``inspect.isclass``), ``__test__`` (anyio's plugin: is it a test?), ``__bases__``
#: (the unittest plugin: ``issubclass(obj, TestCase)``), and, in pytest 9's search for fixtures hidden
#: behind wrappers, ``_mock_name`` and ``inspect.unwrap``'s ``__wrapped__``. A module not yet loaded
#: answers them itself (its class; AttributeError for the rest: none of the modules loaded here has
#: them), where looking them up would load it: collecting loaded torch and openai in every worker.
PROBES = frozenset({"__test__", "__bases__", "_mock_name", "__wrapped__"})


def lazy_import(name: str, skip: str | None = None) -> types.ModuleType:
    """The module ``name``, executed at its first attribute access (or the one already imported).
    It is put in ``sys.modules``, so that a later ``import name`` elsewhere gets the same module.
    When it is not installed: the calling test module is skipped with ``skip`` as the reason, or,
    without one, ModuleNotFoundError."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        if skip is not None:
            pytest.skip(skip, allow_module_level=True)
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    module.__class__ = _probe_safe(type(module))
    parent, _, child = name.rpartition(".")
    if parent:  # as an import binds a submodule to its package
        setattr(sys.modules[parent], child, module)
    return module


def _probe_safe(lazy: type[types.ModuleType]) -> type[types.ModuleType]:
    """A subclass of the lazy module class ``lazy`` that answers :data:`PROBES` without loading;
    loading sets the module's class to ``types.ModuleType`` as before."""

    class ProbeSafeLazyModule(lazy):  # type: ignore[misc, valid-type]
        def __getattribute__(self, attr: str) -> object:
            if attr == "__class__":
                return object.__getattribute__(self, attr)
            if attr in PROBES:
                raise AttributeError(attr)
            return super().__getattribute__(attr)

    return ProbeSafeLazyModule
