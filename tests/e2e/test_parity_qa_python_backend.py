"""Python-backend cases of Triton's QA (``qa/L0_backend_python``) where inferd answers otherwise on
purpose, against a real ``inferd serve`` with tritonclient: BF16 tensors as ``ml_dtypes`` arrays,
and a 1 GiB request (``python_test.py::test_growth_error``). ``init_args`` and ``pytorch_fp32_fp32``
are tests/e2e/test_parity_python.py's.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.python_models import python_model
from tests.servers import Servers

ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason="BF16 numpy arrays need the ml_dtypes package (installed with onnx)"
)

# Observed from Triton 2.51: as_numpy() of a BF16 input raises this TritonModelException, and
# pb_utils.Tensor(name, <ml_dtypes.bfloat16 array>) raises "NumPy dtype is not supported." (it
# wants to_dlpack()/from_dlpack()). inferd gives and takes ml_dtypes.bfloat16 arrays instead.
TRITON_BF16_AS_NUMPY = (
    "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
)
# What Triton's QA expects for a 1 GiB UINT8 input (its stub's shared-memory pool is 1 GiB there).
TRITON_GROWTH_ERROR = "Failed to increase the shared memory pool size"
# inferd's answer: the body is over --http-max-input-size (64 MiB by default) before any model runs.
BODY_LIMIT = (
    "Request body size of {} bytes exceeds the maximum allowed value of 67108864 bytes. "
    "Use --http-max-input-size to increase the limit."
)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"bf16": python_model("bf16_ml_dtypes")})


@pytest.mark.parametrize("module", [httpclient, grpcclient])
def test_bf16_tensors_are_ml_dtypes_arrays(server: ServerProcess, module: object) -> None:
    x = np.array([1.5, -2.0, 3.25, 0.0, 100.0], dtype=ml_dtypes.bfloat16)
    url = server.http_url if module is httpclient else server.grpc_url
    client = module.InferenceServerClient(url)  # type: ignore[attr-defined]
    tensor = module.InferInput("X", [5], "BF16")  # type: ignore[attr-defined]
    tensor.set_data_from_numpy(x)
    result = client.infer("bf16", [tensor])
    assert result.as_numpy("DTYPE")[0] == b"bfloat16"
    y = result.as_numpy("Y")
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), [3.0, -4.0, 6.5, 0.0, 200.0])
    client.close()


def test_a_1_gib_request_names_the_body_limit(server: ServerProcess) -> None:
    """Triton's QA sends 1 GiB and expects TRITON_GROWTH_ERROR from its shared-memory pool; inferd's
    Python models take tensors without such a pool, and the body is refused first, naming the flag
    that sets the limit (answered before any of the body is read: only the head is sent here)."""
    size = 1 << 30
    head = json.dumps({"inputs": [{"name": "X", "datatype": "BF16", "shape": [size // 2],
                                   "parameters": {"binary_data_size": size}}]}).encode()  # fmt: skip
    host, port = server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            b"POST /v2/models/bf16/infer HTTP/1.1\r\nHost: inferd\r\nContent-Type: application/octet-stream\r\n"
            b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s" % (len(head), len(head) + size, head)
        )
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 400 Bad Request"
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert body == {"error": BODY_LIMIT.format(len(head) + size)}
    assert TRITON_GROWTH_ERROR not in body["error"]
