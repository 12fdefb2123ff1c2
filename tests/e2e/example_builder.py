"""``examples/build_models.py`` (it writes the example repository's ONNX model), loaded as a module."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.conftest import ROOT


def build_models() -> ModuleType:
    """The module ``examples/build_models.py``: ``build_mlp(path)`` writes ``mlp_onnx``'s model."""
    spec = importlib.util.spec_from_file_location("build_models", ROOT / "examples" / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
