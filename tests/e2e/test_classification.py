"""Triton's classification extension, over HTTP and gRPC, against values computed here."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
  { name: "Z" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "S" data_type: TYPE_STRING dims: [ 1 ] }
]
"""
MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            s = np.array([[b"s"]] * x.shape[0], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", x), pb_utils.Tensor("Z", (x * 10).astype(np.int32)), pb_utils.Tensor("S", s)]))
        return out
"""
LABELS = ["cat", "dog", "bird"]  # index 3 has no label, as a short label file allows


def expected(x: np.ndarray, k: int, fmt, labels=None) -> np.ndarray:
    rows = []
    for row in x:
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        rows.append(
            [(f"{fmt(row[i])}:{i}" + (f":{labels[i]}" if labels and i < len(labels) else "")).encode() for i in order]
        )
    return np.array(rows, dtype=np.object_)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"cls": {"config.pbtxt": CONFIG, "labels.txt": "\n".join(LABELS) + "\n", "1/model.py": MODEL}})


X = np.array([[0.1, 0.7, 0.2, 0.0], [1.5, -2.0, 3.25, 0.5]], np.float32)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_top_k_with_labels(server, protocol):
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    inp = lib.InferInput("X", list(X.shape), "FP32")
    inp.set_data_from_numpy(X)
    outputs = [lib.InferRequestedOutput("Y", class_count=2), lib.InferRequestedOutput("Z", class_count=10)]
    result = client.infer("cls", [inp], outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("Y"), expected(X, 2, lambda v: f"{v:f}", LABELS))
    np.testing.assert_array_equal(result.as_numpy("Z"), expected((X * 10).astype(np.int32), 4, str))


def test_classification_of_a_string_output_is_refused(server):
    client = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("X", list(X.shape), "FP32")
    inp.set_data_from_numpy(X)
    with pytest.raises(InferenceServerException) as err:
        client.infer("cls", [inp], outputs=[httpclient.InferRequestedOutput("S", class_count=1)])
    assert "'S'" in str(err.value) and "BYTES" in str(err.value)
    assert "classification" in client.get_server_metadata()["extensions"]
