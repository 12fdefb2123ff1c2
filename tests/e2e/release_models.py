"""What the shadow, capture and replay tests share (docs/traffic.md): a versioned model whose
versions can disagree on chosen inputs, and unversioned requests sent pipelined over HTTP/1.1."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.traffic_models import parameters, pipelined, versions_of  # noqa: F401  # re-exported for the release tests

#: Y = X * 2 (INT32), F = X / 4 (FP32) (the version answering is the response's model_version); ``{diverge}``: Y is off by one where
#: X % diverge == 0 (0: never); ``{noise}`` is added to F; ``{shift}`` to every Y; each request
#: sleeps ``{sleep}`` seconds.
MODEL_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        out = []
        for r in requests:
            time.sleep({sleep})
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            y = x * 2 + {shift}
            if {diverge}:
                y = np.where(x % {diverge} == 0, y + 1, y)
            f = (x.astype(np.float32) / 4 + np.float32({noise})).astype(np.float32)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", y.astype(np.int32)),
                pb_utils.Tensor("F", f),
            ]))
        return out
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ -1 ] }},
         {{ name: "F" data_type: TYPE_FP32 dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
version_policy: {{ all: {{}} }}
{parameters}
"""


def model(name: str, versions: dict[int, dict[str, Any]], **params: str) -> dict[str, str]:
    """Model ``name``: version v built with ``versions[v]`` (``diverge``, ``noise``, ``shift``, ``sleep``)."""
    files = {"config.pbtxt": CONFIG.format(name=name, parameters=parameters(**params))}
    for v, how in versions.items():
        files[f"{v}/model.py"] = MODEL_PY.format(
            diverge=how.get("diverge", 0),
            noise=how.get("noise", 0.0),
            shift=how.get("shift", 0),
            sleep=how.get("sleep", 0),
        )
    return files


def infer_body(x: int, request_id: str = "", **params: Any) -> bytes:
    body: dict[str, Any] = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [x]}]}
    if request_id:
        body["id"] = request_id
    if params:
        body["parameters"] = params
    return json.dumps(body).encode()
