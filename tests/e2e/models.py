"""Python-backend models the end-to-end tests serve (written into temp repositories)."""

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

# OUTPUT0 = a + b + OFFSET, OUTPUT1 = a - b: OFFSET lets a test tell versions apart.
ADD_SUB_PY = """
import triton_python_backend_utils as pb_utils

OFFSET = {offset}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", a + b + OFFSET),
                pb_utils.Tensor("OUTPUT1", a - b),
            ]))
        return out
"""

# Fails the whole execute() when any request carries a negative value.
PICKY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT64 dims: [ -1 ] } ]
"""
PICKY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            if (x < 0).any():
                raise ValueError(f"negative input {x.min()}")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
        return out
"""

# Echoes BYTES and the request's id and parameters so tests can see what reached the model.
ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "META" data_type: TYPE_STRING dims: [ 2 ] }
]
"""
ECHO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            meta = np.array([r.request_id().encode(), r.parameters().encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TEXT_OUT", np.array([t[::-1] for t in text], dtype=np.object_)),
                pb_utils.Tensor("META", meta),
            ]))
        return out
"""

# Sleeps for the number of milliseconds it is sent, then answers with it.
SLOW_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "MS_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 4 } ]
"""
SLOW_PY = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            ms = pb_utils.get_input_tensor_by_name(r, "MS").as_numpy()
            time.sleep(float(ms[0]) / 1000.0)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("MS_OUT", ms)]))
        return out
"""


def add_sub(offset: int = 0, versions: tuple[int, ...] = (1,), config: str = ADD_SUB_CONFIG) -> dict[str, str]:
    files = {"config.pbtxt": config}
    for v in versions:
        files[f"{v}/model.py"] = ADD_SUB_PY.format(offset=offset)
    return files


def simple(config: str, code: str) -> dict[str, str]:
    return {"config.pbtxt": config, "1/model.py": code}
