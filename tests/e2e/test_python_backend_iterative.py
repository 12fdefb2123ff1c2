"""``iterative_sequence`` models and request rescheduling on a real ``inferd serve`` (tritonclient HTTP,
gRPC and a gRPC stream).

Checked against Triton 2.51 with the same models: a request without a correlation id is accepted
and gets an id of its own; the model sees START on the first run and no flag on each rescheduled
run; a client id with START is kept; a client id without START is refused with Triton's sentence.
(Triton never answers a model that reschedules without ``iterative_sequence``; inferd answers an
error naming the model and the setting.)
"""

from __future__ import annotations

import queue
import textwrap

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

# Not decoupled: runs each request IN times (rescheduling it in between), then answers OUT = runs
# and CID = "<correlation id>|flags=<flags seen on each run>".
PLAIN_CONFIG = """
backend: "python"
max_batch_size: 0
sequence_batching { iterative_sequence: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "CID" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
PLAIN_PY = source("python_backend_iterative_plain")
# Decoupled, batching (NVIDIA's rescheduling example): IN responses counting down to 0, one per run.
DECOUPLED_CONFIG = """
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
sequence_batching { iterative_sequence: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "CID" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
DECOUPLED_PY = source("python_backend_iterative_decoupled")
# Reschedules without iterative_sequence: an error, not a hang.
NOT_ITERATIVE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
NOT_ITERATIVE_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
        return [None for r in requests]
"""


def _model(config: str, code: str) -> dict[str, str]:
    return {"config.pbtxt": textwrap.dedent(config), "1/model.py": textwrap.dedent(code)}


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "iter_plain": _model(PLAIN_CONFIG, PLAIN_PY),
        "iter_dec": _model(DECOUPLED_CONFIG, DECOUPLED_PY),
        "not_iterative": _model(NOT_ITERATIVE_CONFIG, NOT_ITERATIVE_PY),
    }
    return serve(repo)


def _infer(server, protocol: str, model: str, n: int, **kw) -> tuple[int, str]:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    x = module.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    result = client.infer(model, [x], **kw)
    return int(result.as_numpy("OUT")[0]), result.as_numpy("CID")[0].decode()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_request_without_correlation_id_runs_until_the_model_releases_it(server, protocol):
    runs, cid = _infer(server, protocol, "iter_plain", 3)
    key, flags = cid.split("|")
    assert runs == 3 and flags == "flags=[1, 0, 0]"  # START first, then neither START nor END
    assert int(key) > 0  # an id of its own
    _, again = _infer(server, protocol, "iter_plain", 1)
    assert again.split("|")[0] != key and again.endswith("flags=[1]")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_correlation_id_with_start_is_kept(server, protocol):
    assert _infer(server, protocol, "iter_plain", 2, sequence_id=42, sequence_start=True) == (2, "42|flags=[1, 0]")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_client_correlation_id_without_start_is_refused(server, protocol):
    with pytest.raises(InferenceServerException) as err:
        _infer(server, protocol, "iter_plain", 2, sequence_id=43)
    assert "inference request for sequence 43 to model 'iter_plain' must specify the START flag on the first " \
           "request of the sequence" in str(err.value)  # fmt: skip


def test_decoupled_iterative_requests_stream_one_response_per_run(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    counts = {"a": 3, "b": 2, "c": 1}
    try:
        for rid, n in counts.items():
            x = grpcclient.InferInput("IN", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[n]], np.int32))
            kw = {"sequence_id": 7, "sequence_start": True} if rid == "c" else {}
            client.async_stream_infer("iter_dec", [x], request_id=rid, **kw)
        seen: dict[str, list[tuple[int, str, bool]]] = {rid: [] for rid in counts}
        for _ in range(sum(counts.values())):
            result, error = got.get(timeout=30)
            assert error is None, error
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            seen[response.id].append((int(result.as_numpy("OUT")[0, 0]), result.as_numpy("CID")[0, 0].decode(), final))
    finally:
        client.stop_stream()
    for rid, n in counts.items():
        assert [left for left, _, _ in seen[rid]] == list(range(n - 1, -1, -1))
        assert [final for _, _, final in seen[rid]] == [False] * (n - 1) + [True]
        assert [cid.split("|")[1] for _, cid, _ in seen[rid]] == ["flags=1"] + ["flags=0"] * (n - 1)
    assert seen["c"][0][1] == "7|flags=1"


def test_rescheduling_without_iterative_sequence_is_an_error_and_the_server_stays_up(server):
    client = httpclient.InferenceServerClient(server.http_url)
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException) as err:
        client.infer("not_iterative", [x])
    assert "model 'not_iterative' released request" in str(err.value)
    assert "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE" in str(err.value) and "iterative_sequence: true" in str(err.value)
    assert client.is_server_live() and _infer(server, "http", "iter_plain", 1)[0] == 1
