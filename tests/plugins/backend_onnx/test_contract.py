"""The backend contract for the onnxruntime backend: ``inferd serve`` with the installed plugin."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository

from . import models as m

CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "MM" data_type: TYPE_FP32 dims: [ 3 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


class TestOnnxBackendContract(BackendContract):
    inputs = [InputSpec("A", "FP32", (4,)), InputSpec("B", "FP32", (4,))]

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(root, {"addmm": {"config.pbtxt": CONFIG, "1/model.onnx": lambda p: m.save(m.add_matmul(), p)}})

        def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            a, b = inputs["A"], inputs["B"]
            return {"SUM": a + b, "MM": a @ m.MATMUL_W}

        return ContractModel("addmm", expected)
