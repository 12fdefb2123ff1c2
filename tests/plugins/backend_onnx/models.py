"""ONNX models built for the tests with onnx.helper (and one exported from torch)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# onnxruntime 1.17 reads IR version 9; recent onnx writes newer ones by default.
IR_VERSION = 9
OPSET = 17
RNG = np.random.default_rng(7)
MATMUL_W = RNG.standard_normal((4, 3)).astype(np.float32)


def make_model(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], initializers: list[Any] = ()
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def vi(name: str, elem: int, shape: list[Any]) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def add_matmul(batch: Any = "batch") -> onnx.ModelProto:
    """SUM = A + B, MM = A @ W (W a 4x3 initializer); A, B [batch, 4] FP32."""
    return make_model(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("MatMul", ["A", "W"], ["MM"])],
        [vi("A", TensorProto.FLOAT, [batch, 4]), vi("B", TensorProto.FLOAT, [batch, 4])],
        [vi("SUM", TensorProto.FLOAT, [batch, 4]), vi("MM", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(MATMUL_W, "W")],
    )


def strings() -> onnx.ModelProto:
    """OUT = Identity(IN), IN [batch, 2] STRING."""
    return make_model(
        [helper.make_node("Identity", ["IN"], ["OUT"])],
        [vi("IN", TensorProto.STRING, ["batch", 2])],
        [vi("OUT", TensorProto.STRING, ["batch", 2])],
    )


def fp16() -> onnx.ModelProto:
    """Y = X * 2, X [batch, 3] FP16."""
    two = numpy_helper.from_array(np.array(2, dtype=np.float16), "TWO")
    return make_model(
        [helper.make_node("Mul", ["X", "TWO"], ["Y"])],
        [vi("X", TensorProto.FLOAT16, ["batch", 3])],
        [vi("Y", TensorProto.FLOAT16, ["batch", 3])],
        [two],
    )


def booleans() -> onnx.ModelProto:
    """AND = A and B, NOT = not A; A, B [2, 3] BOOL (no batch dimension)."""
    return make_model(
        [helper.make_node("And", ["A", "B"], ["AND"]), helper.make_node("Not", ["A"], ["NOT"])],
        [vi("A", TensorProto.BOOL, [2, 3]), vi("B", TensorProto.BOOL, [2, 3])],
        [vi("AND", TensorProto.BOOL, [2, 3]), vi("NOT", TensorProto.BOOL, [2, 3])],
    )


def fixed_int() -> onnx.ModelProto:
    """Z = X + Y, X, Y [2, 2] INT32 (fixed shapes: auto-complete gives max_batch_size 0)."""
    return make_model(
        [helper.make_node("Add", ["X", "Y"], ["Z"])],
        [vi("X", TensorProto.INT32, [2, 2]), vi("Y", TensorProto.INT32, [2, 2])],
        [vi("Z", TensorProto.INT32, [2, 2])],
    )


def big_linear(batch: Any = "batch") -> onnx.ModelProto:
    """Y = X @ W + 1 with a 64x64 weight (large enough to be stored as external data)."""
    w = RNG.standard_normal((64, 64)).astype(np.float32)
    one = numpy_helper.from_array(np.ones((64,), np.float32), "ONE")
    return make_model(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "ONE"], ["Y"])],
        [vi("X", TensorProto.FLOAT, [batch, 64])],
        [vi("Y", TensorProto.FLOAT, [batch, 64])],
        [numpy_helper.from_array(w, "W"), one],
    )


def save(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def save_external(model: onnx.ModelProto, path: Path, data_name: str) -> None:
    """Save with every initializer in ``data_name`` beside ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data_name,
              size_threshold=0)  # fmt: skip
    assert (path.parent / data_name).is_file()


def torch_mlp(path: Path) -> bool:
    """Export a small torch MLP (x [batch, 8] -> y [batch, 3]) to ``path``; False if export fails."""
    try:
        import torch
    except ImportError:
        return False

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = torch.nn.Linear(8, 16)
            self.l2 = torch.nn.Linear(16, 3)

        def forward(self, x: Any) -> Any:
            return self.l2(torch.relu(self.l1(x)))

    torch.manual_seed(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                MLP().eval(), (torch.randn(2, 8),), str(path), input_names=["x"], output_names=["y"],
                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False, opset_version=OPSET,
            )  # fmt: skip
    except Exception:
        return False
    model = onnx.load(str(path))
    model.ir_version = min(model.ir_version, IR_VERSION)
    onnx.save(model, str(path))
    return True


def mlp_fallback() -> onnx.ModelProto:
    """The same MLP shape built with onnx.helper (when torch export is unavailable)."""
    w1 = numpy_helper.from_array(RNG.standard_normal((8, 16)).astype(np.float32), "W1")
    w2 = numpy_helper.from_array(RNG.standard_normal((16, 3)).astype(np.float32), "W2")
    return make_model(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["y"])],
        [vi("x", TensorProto.FLOAT, ["batch", 8])],
        [vi("y", TensorProto.FLOAT, ["batch", 3])],
        [w1, w2],
    )  # fmt: skip
