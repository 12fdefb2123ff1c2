"""The backend contract for the python backend: ``inferd serve`` with the installed plugin."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository
from tests.python_models import source

CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""

MODEL = source("python_contract")


def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a, b = inputs["INPUT0"], inputs["INPUT1"].astype(np.float32)
    return {"OUTPUT0": a + b, "OUTPUT1": a * b}


class TestPythonBackendContract(BackendContract):
    inputs = [InputSpec("INPUT0", "FP32", (4,)), InputSpec("INPUT1", "INT32", (4,))]

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(root, {"add_sub": {"config.pbtxt": CONFIG, "1/model.py": textwrap.dedent(MODEL)}})
        return ContractModel("add_sub", expected)
