"""The benchmark's models and the two repositories that serve them.

``tiny`` is one ONNX Add (``OUTPUT = INPUT + C``, [b,16] FP32); ``mlp`` is onnx_mlp.py's 256→1024→1024→16
MLP with seeded weights. Each is written once as ONNX; inferd serves the file with its onnxruntime
backend, Triton 2.51 (Python backend only) with a ``model.py`` that runs the same file with
onnxruntime. Each model appears twice in each repository: ``NAME`` (no batcher) and
``NAME_batched`` (``dynamic_batching { }``), with the same max_batch_size and instance count.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from onnx_mlp import IN, OUT, build_mlp

TINY_WIDTH = 16


@dataclass(frozen=True)
class BenchModel:
    """One generated model: its ONNX file, input/output widths and a numpy reference."""

    name: str
    onnx_path: Path
    in_width: int
    out_width: int

    def reference(self, x: np.ndarray) -> np.ndarray:
        """The expected output, computed with numpy from the ONNX file's own initializers."""
        model = onnx.load(str(self.onnx_path))
        w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        if self.name == "tiny":
            return x + w["C"]
        h = x
        for i in range(3):
            h = h @ w[f"W{i}"] + w[f"B{i}"]
            if i < 2:
                h = np.maximum(h, 0.0)
        return h.astype(np.float32)

    def sample_input(self, seed: int = 1) -> np.ndarray:
        """The batch-1 input every request carries."""
        return np.random.default_rng(seed).standard_normal((1, self.in_width)).astype(np.float32)


def build_tiny(path: Path, seed: int = 0) -> None:
    """Write ``OUTPUT = INPUT + C`` with a seeded constant C of width 16 (dynamic batch dimension)."""
    c = np.random.default_rng(seed).standard_normal(TINY_WIDTH).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT", "C"], ["OUTPUT"])],
        "tiny",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", TINY_WIDTH])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", TINY_WIDTH])],
        initializer=[numpy_helper.from_array(c, "C")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def generate(names: list[str], root: Path) -> dict[str, BenchModel]:
    """Write the named models' ONNX files under ``root``."""
    out: dict[str, BenchModel] = {}
    for name in names:
        path = root / "onnx" / f"{name}.onnx"
        if name == "tiny":
            build_tiny(path)
            out[name] = BenchModel(name, path, TINY_WIDTH, TINY_WIDTH)
        elif name == "mlp":
            build_mlp(path)
            out[name] = BenchModel(name, path, IN, OUT)
        else:
            raise SystemExit(f"unknown model {name!r}: choose from tiny, mlp")
    return out


def served_name(model: str, batching: bool) -> str:
    """The repository name of ``model`` with or without the dynamic batcher."""
    return f"{model}_batched" if batching else model


def _config(name: str, backend: str, m: BenchModel, batching: bool, max_batch: int, instances: int) -> str:
    lines = [
        f'name: "{name}"',
        f'backend: "{backend}"',
        f"max_batch_size: {max_batch}",
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {m.in_width} ] }} ]',
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {m.out_width} ] }} ]',
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]",
    ]
    if batching:
        lines.append("dynamic_batching { }")
    return "\n".join(lines) + "\n"


TRITON_MODEL_PY = '''"""Triton Python-backend model: the same onnxruntime call inferd's onnxruntime backend makes."""
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

INTRA_OP_THREADS = {threads}


class TritonPythonModel:
    def initialize(self, args):
        so = ort.SessionOptions()
        so.intra_op_num_threads = INTRA_OP_THREADS
        so.inter_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy() for r in requests]
        x = xs[0] if len(xs) == 1 else np.concatenate(xs)
        y = self.session.run(["OUTPUT"], {{"INPUT": x}})[0]
        responses, start = [], 0
        for part in xs:
            rows = part.shape[0]
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", y[start:start + rows])]))
            start += rows
        return responses
'''


def write_repositories(
    models: dict[str, BenchModel], root: Path, max_batch: int, instances: int, intra_op_threads: int
) -> tuple[Path, Path]:
    """Write the inferd and the Triton repository under ``root``; return (inferd_repo, triton_repo)."""
    inferd_repo, triton_repo = root / "inferd-models", root / "triton-models"
    for m in models.values():
        for batching in (False, True):
            name = served_name(m.name, batching)
            for repo, backend in ((inferd_repo, "onnxruntime"), (triton_repo, "python")):
                version = repo / name / "1"
                version.mkdir(parents=True, exist_ok=True)
                (version / "model.onnx").write_bytes(m.onnx_path.read_bytes())
                (repo / name / "config.pbtxt").write_text(_config(name, backend, m, batching, max_batch, instances))
            (triton_repo / name / "1" / "model.py").write_text(TRITON_MODEL_PY.format(threads=intra_op_threads))
    return inferd_repo, triton_repo
