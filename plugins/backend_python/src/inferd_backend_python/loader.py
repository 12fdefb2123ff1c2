"""Importing a ``model.py`` in the server process, each loaded version under a name of its own.

Triton imports ``<version>/model.py`` as module ``<version>.model`` in a fresh stub process with
the version directory and the model directory appended to ``sys.path``, so ``import helpers``
(a file beside model.py) and ``from . import helpers`` both work. inferd does the same in one
process: each load gets a synthetic package whose ``__path__`` is the version directory (relative
imports stay private to the model), both directories go on ``sys.path`` (first, while model.py is
imported; appended afterwards, as Triton leaves them), and sibling modules imported at import time
are then dropped from ``sys.modules`` so another model's file of the same name is not shadowed.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import itertools
import re
import sys
import threading
import types
from pathlib import Path

from inferd.api import InternalError, InvalidArgument, NotFound

_counter = itertools.count(1)
_lock = threading.Lock()  # sys.path and sys.modules are process-wide


def _package_name(model_name: str, version: int | str) -> str:
    safe = re.sub(r"\W", "_", model_name)
    return f"_inferd_python_model_{next(_counter)}_{safe}_v{version}"


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path.startswith(root) for root in roots)


def import_model_file(model_name: str, version: int | str, path: Path, model_dir: Path) -> types.ModuleType:
    """Import ``path`` (a model.py) and return the module; errors name the model and the file.

    The module must define ``TritonPythonModel`` with an ``execute`` method.
    """
    label = f"model '{model_name}' version {version}"
    if not path.is_file():
        raise NotFound(f"{label}: Python model file not found in '{path}'")
    version_dir = str(path.parent.resolve())
    dirs = (version_dir, str(model_dir.resolve()))
    package = _package_name(model_name, version)
    module_name = f"{package}.{path.stem}"

    parent = types.ModuleType(package)
    parent.__path__ = [version_dir]
    parent.__package__ = package
    parent.__spec__ = importlib.machinery.ModuleSpec(package, None, is_package=True)
    parent.__spec__.submodule_search_locations = [version_dir]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)

    with _lock:
        before = set(sys.modules)
        for d in reversed(dirs):
            sys.path.insert(0, d)
        sys.modules[package] = parent
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:
            forget_package(package)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise InternalError(f"{label}: failed to import '{path}': {type(exc).__name__}: {exc}") from exc
        finally:
            for d in dirs:
                sys.path.remove(d)
                if d not in sys.path:
                    sys.path.append(d)
            _drop_siblings(before, dirs, package)

    check_model_class(module, label, path)
    return module


def check_model_class(module: types.ModuleType, label: str, path: Path) -> type:
    """Return ``module.TritonPythonModel`` or raise an error saying what is missing."""
    cls = getattr(module, "TritonPythonModel", None)
    if not isinstance(cls, type):
        forget_package(module.__name__.rpartition(".")[0])
        raise InvalidArgument(f"{label}: '{path}' defines no class named 'TritonPythonModel'")
    if not callable(getattr(cls, "execute", None)):
        forget_package(module.__name__.rpartition(".")[0])
        raise InvalidArgument(f"{label}: class TritonPythonModel in '{path}' does not implement `execute` method")
    return cls


def _drop_siblings(before: set[str], dirs: tuple[str, ...], package: str) -> None:
    roots = tuple(d.rstrip("/") + "/" for d in dirs)
    for name in set(sys.modules) - before:
        if name == package or name.startswith(package + "."):
            continue
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and _under(str(Path(file).resolve()), roots):
            del sys.modules[name]


def forget_package(package: str) -> None:
    """Drop a model's synthetic package and its modules from ``sys.modules`` (at unload)."""
    if not package:
        return
    prefix = package + "."
    # list() copies the keys in one step: other threads import (and add modules) meanwhile
    for name in [n for n in list(sys.modules) if n == package or n.startswith(prefix)]:
        sys.modules.pop(name, None)
