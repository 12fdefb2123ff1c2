"""The backend contract for the pytorch backend: ``inferd serve`` with the installed plugin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository
from tests.lazy import lazy_import

#: Loaded on first use: every xdist worker collects this file, few run it (torch costs ~2 s of CPU to import).
models = lazy_import("tests.plugins.backend_pytorch.models")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    a, b = inputs["INPUT__0"], inputs["INPUT__1"]
    return {"OUTPUT__0": a + b, "OUTPUT__1": a - b}


class TestPyTorchBackendContract(BackendContract):
    inputs = [InputSpec("INPUT__0", "FP32", (4,)), InputSpec("INPUT__1", "FP32", (4,))]

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(
            root, {"add_sub": {"config.pbtxt": CONFIG, "1/model.pt": lambda p: models.save_script(models.AddSub(), p)}}
        )
        return ContractModel("add_sub", expected)
