"""A small ONNX model built with onnx.helper, and its numpy reference (shared by the GPU tests)."""

from __future__ import annotations

import numpy as np

WEIGHTS = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 7.0
BIAS = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def linear_relu_onnx() -> bytes:
    """INPUT0 FP32 [batch, 4] -> OUTPUT0 = INPUT0 @ W + B ([batch, 3]), OUTPUT1 = relu(INPUT0)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W"], ["XW"]),
            helper.make_node("Add", ["XW", "B"], ["OUTPUT0"]),
            helper.make_node("Relu", ["INPUT0"], ["OUTPUT1"]),
        ],
        "linear_relu",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=[numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def linear_relu_expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    x = inputs["INPUT0"].astype(np.float32)
    return {"OUTPUT0": x @ WEIGHTS + BIAS, "OUTPUT1": np.maximum(x, 0)}
