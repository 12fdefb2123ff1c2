"""``inferd check`` shows what checking a model logged as a warning under that model's row (and in
``--json``), not bare on stderr: here auto-complete's guess of an ONNX model's batch size."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def inferd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferd.host.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    pytest.importorskip("onnx")
    pytest.importorskip("inferd_backend_onnx")
    spec = importlib.util.spec_from_file_location("build_models", ROOT / "examples" / "build_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build_mlp(tmp_path / "models" / "mlp" / "1" / "model.onnx")
    (tmp_path / "models" / "mlp" / "config.pbtxt").unlink()  # nothing says max_batch_size: a guess
    return tmp_path / "models"


def test_a_warning_is_shown_under_its_model(repo: Path) -> None:
    done = inferd("check", str(repo))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == [
        "mlp    OK     onnxruntime, versions [1]",
        "              warning: autofilled max_batch_size to 4 for model 'mlp' since batching is supported but no "
        "max_batch_size is specified in model configuration. Must specify max_batch_size to utilize autofill with "
        "a larger max batch size",
    ]
    assert "autofilled" not in done.stderr
    (model,) = json.loads(inferd("check", "--json", str(repo)).stdout)["models"]
    assert model["warnings"] == [done.stdout.splitlines()[1].split("warning: ", 1)[1]]
