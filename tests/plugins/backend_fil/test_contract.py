"""The backend contract for the fil backend: ``inferd serve`` with the installed plugin."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository

from . import trees

CONFIG = """
backend: "fil"
max_batch_size: 32
input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 6 ] } ]
output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "model_type" value { string_value: "xgboost_json" } }
parameters { key: "is_classifier" value { string_value: "true" } }
parameters { key: "predict_proba" value { string_value: "true" } }
"""


class TestFilBackendContract(BackendContract):
    inputs = [InputSpec("input__0", "FP32", (6,))]

    def contract_repository(self, root: Path) -> ContractModel:
        booster = trees.multiclass()
        write_repository(
            root, {"trees": {"config.pbtxt": CONFIG, "1/xgboost.json": lambda p: booster.save_model(str(p))}}
        )

        def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            return {"output__0": trees.probabilities(booster, inputs["input__0"]).astype(np.float32)}

        return ContractModel("trees", expected)
