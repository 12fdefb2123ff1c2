"""Generate the example models that are built rather than committed (weights are never committed).

Writes ``examples/models/mlp_onnx/1/model.onnx``: a small MLP (input [batch, 8] FP32, output
[batch, 3]) with fixed random weights, and a config.pbtxt that says only ``max_batch_size``, so
inferd's onnxruntime backend completes the rest from the graph (inputs, outputs, dynamic batching,
instances) with nothing to warn about. Needs the ``onnx`` package; skipped with a note without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent / "models"
#: The one field auto-complete would otherwise fill with a warning (the batch size it guesses).
MLP_CONFIG = "# inputs, outputs, dynamic batching and instances: completed from model.onnx\nmax_batch_size: 4\n"


def build_mlp(path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((8, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["INPUT", "W0"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "W1"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", 3])],
        initializer=[numpy_helper.from_array(w0, "W0"), numpy_helper.from_array(w1, "W1")],
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    write_mlp_config(path.parent.parent)


def write_mlp_config(model_dir: Path) -> None:
    """The model's config.pbtxt, unless it has one."""
    config = model_dir / "config.pbtxt"
    if not config.exists():
        config.write_text(MLP_CONFIG)


def main() -> int:
    target = MODELS / "mlp_onnx" / "1" / "model.onnx"
    if target.exists():
        write_mlp_config(target.parent.parent)  # a checkout whose model predates its config
        return 0
    try:
        build_mlp(target)
    except ImportError:
        print("examples/build_models.py: the 'onnx' package is missing; skipping mlp_onnx", file=sys.stderr)
        return 0
    print(f"wrote {target.relative_to(MODELS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
