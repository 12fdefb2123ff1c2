"""Modules loaded when first used, not when pytest collects the file that imports them: every xdist
worker collects every test file, so a heavy import at the top of one (torch, openai, boto3, moto) cost
each worker its CPU, even the workers that never run that file."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest


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
    parent, _, child = name.rpartition(".")
    if parent:  # as an import binds a submodule to its package
        setattr(sys.modules[parent], child, module)
    return module
