"""A hung model is recoverable: a client that times out or goes away frees its request (it leaves
the queue, a Python model sees ``is_cancelled()``, its tenant's slot goes back at once), and an
unload of a model whose ``execute`` never returns completes after ``--model-unload-timeout-secs``
(the instance is abandoned), so a reload can serve again.

Against a real ``inferd serve``: HTTP, and gRPC on both transports (h2, grpcio).
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.h2_client import GRPC_HEADERS, RawConnection, message
from tests.servers import Servers

# Waits SECONDS, or until its request is cancelled (Triton's request.is_cancelled()).
PATIENT_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "CANCELLED" data_type: TYPE_BOOL dims: [ 1 ] } ]
"""
PATIENT_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            end = time.monotonic() + float(pb_utils.get_input_tensor_by_name(r, "SECONDS").as_numpy()[0])
            while time.monotonic() < end and not r.is_cancelled():
                time.sleep(0.02)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("CANCELLED", np.array([r.is_cancelled()]))]))
        return out
"""
# X = 1: execute never returns (it first creates the file MARKER); X = 0: answers at once.
STUCK_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
STUCK_PY = """
import pathlib, threading
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X").as_numpy()
        if x[0] == 1:
            pathlib.Path({marker!r}).touch()
            threading.Event().wait()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)])]
"""

ONE = {"authorization": "Bearer one-key"}
ADMIN = {"authorization": "Bearer admin-key"}
UNLOAD_TIMEOUT = 2


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp(f"hung-{request.param}")
    repo = write_repository(
        root / "models",
        {
            "add_sub": models.add_sub(),
            "patient": {"config.pbtxt": PATIENT_CONFIG, "1/model.py": PATIENT_PY},
            "stuck": {"config.pbtxt": STUCK_CONFIG, "1/model.py": STUCK_PY.format(marker=str(root / "executing"))},
        },
    )
    tenants = {
        "one": {"keys": [digest("one-key")], "concurrency": 1},
        "admin": {"keys": [digest("admin-key")], "apis": ["health", "metadata", "inference", "model-repository"]},
    }
    (root / "auth.json").write_text(json.dumps({"tenants": tenants}))
    with serve(
        repo,
        f"--grpc-transport={request.param}",
        f"--auth-config={root / 'auth.json'}",
        "--model-control-mode=explicit",
        "--load-model=*",
        f"--model-unload-timeout-secs={UNLOAD_TIMEOUT}",
        "--exit-timeout-secs=5",
    ) as proc:
        yield proc


def _post(server: ServerProcess, path: str, body: dict, headers: dict[str, str], timeout: float) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server.http_url, timeout=timeout)
    try:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else {}
    finally:
        conn.close()


def _tensor(name: str, datatype: str, value: float) -> dict:
    return {"name": name, "shape": [1], "datatype": datatype, "data": [value]}


def _add_sub_body() -> dict:
    data = {"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
    return {"inputs": [{"name": "INPUT0", **data}, {"name": "INPUT1", **data}]}


def _time_out_on_patient(server: ServerProcess, protocol: str) -> None:
    """A request of tenant 'one' to ``patient`` (10 minutes) whose client gives up after 1 s."""
    if protocol == "http":
        with pytest.raises(TimeoutError):  # the client closes the connection
            _post(server, "/v2/models/patient/infer", {"inputs": [_tensor("SECONDS", "FP32", 600)]}, ONE, 1.0)
        return
    client = grpcclient.InferenceServerClient(server.grpc_url)
    seconds = grpcclient.InferInput("SECONDS", [1], "FP32")
    seconds.set_data_from_numpy(np.array([600], np.float32))
    with pytest.raises(InferenceServerException, match="Deadline"):
        client.infer("patient", [seconds], headers=ONE, client_timeout=1.0)
    client.close()


def _go_away_from_patient(server: ServerProcess, how: str) -> None:
    """A plain unary gRPC call of tenant 'one' to ``patient`` (10 minutes, no deadline: the h2
    transport's short path) whose client resets the stream, or closes the connection, after 1 s."""
    request = service_pb2.ModelInferRequest(model_name="patient", raw_input_contents=[np.float32(600).tobytes()])
    request.inputs.add(name="SECONDS", datatype="FP32", shape=[1])
    raw = RawConnection(int(server.grpc_url.rsplit(":", 1)[1]))
    try:
        stream = raw.call("/inference.GRPCInferenceService/ModelInfer", message(request.SerializeToString()),
                          [*GRPC_HEADERS, (b"authorization", ONE["authorization"].encode())])  # fmt: skip
        time.sleep(1.0)
        if how == "reset":
            stream.reset(0x8)  # CANCEL, the connection stays open
            raw.flush()
            time.sleep(0.5)
    finally:
        raw.close()


@pytest.mark.parametrize("protocol", ["http", "grpc", "grpc-reset", "grpc-close"])
def test_a_client_that_gives_up_frees_its_slot_and_the_model(server, protocol):
    if protocol.startswith("grpc-"):
        _go_away_from_patient(server, protocol.removeprefix("grpc-"))
    else:
        _time_out_on_patient(server, protocol)
    # The tenant's one slot is free again: its next request is served, not refused with 429.
    deadline, status = time.monotonic() + 10, 0
    while time.monotonic() < deadline:
        status, _ = _post(server, "/v2/models/add_sub/infer", _add_sub_body(), ONE, 10)
        if status != 429:
            break
        time.sleep(0.2)
    assert status == 200, f"tenant 'one' still refused ({status}) after its only request's client gave up"
    # The request was cancelled: the model saw is_cancelled() and gave its instance back.
    status, body = _post(server, "/v2/models/patient/infer", {"inputs": [_tensor("SECONDS", "FP32", 0)]}, ONE, 10)
    assert status == 200, body
    assert body["outputs"][0]["data"] == [False]


def test_unloading_a_model_stuck_in_execute_completes_and_a_reload_serves(server):
    marker = server.repositories[0].parent / "executing"
    stuck: dict[str, object] = {}

    def call() -> None:
        stuck["answer"] = _post(server, "/v2/models/stuck/infer", {"inputs": [_tensor("X", "INT32", 1)]}, ADMIN, 60)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the stuck model never started executing"
        time.sleep(0.05)

    started = time.monotonic()
    try:
        status, body = _post(server, "/v2/repository/models/stuck/unload", {}, ADMIN, 30)
    except TimeoutError:
        pytest.fail(f"unloading a model stuck in execute did not finish in 30 s (--model-unload-timeout-secs "
                    f"is {UNLOAD_TIMEOUT})")  # fmt: skip
    took = time.monotonic() - started
    assert status == 200, body
    assert took < UNLOAD_TIMEOUT + 15, took
    # The request stuck in the abandoned instance is answered (UNAVAILABLE), not left hanging.
    caller.join(15)
    assert not caller.is_alive(), "the stuck request was never answered"
    code, answer = stuck["answer"]  # type: ignore[misc]
    assert code == 503 and "unloading" in answer["error"], answer
    assert "abandoned" in server.log() and "'stuck'" in server.log()

    status, body = _post(server, "/v2/repository/models/stuck/load", {}, ADMIN, 60)
    assert status == 200, body
    status, body = _post(server, "/v2/models/stuck/infer", {"inputs": [_tensor("X", "INT32", 0)]}, ADMIN, 30)
    assert status == 200, body
    assert body["outputs"][0]["data"] == [0]
    marker.unlink()


# Answers X after a short sleep, on one instance: concurrent requests queue for it.
BUSY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BUSY_PY = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.002)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
                for r in requests]
"""


def test_clients_that_go_away_while_queued_leave_no_traceback_and_no_lost_instance(tmp_path):
    """Many clients queued for one instance hang up at once, as a load generator's do when it
    stops: each cancelled waiter leaves the queue once (before: a release() between a
    waiter's cancel and its wake-up dropped it, then its own clean-up raised ``ValueError: <Future
    cancelled> is not in deque``, one traceback per waiter), and the instance is not lost."""
    repo = write_repository(tmp_path / "models", {"busy": {"config.pbtxt": BUSY_CONFIG, "1/model.py": BUSY_PY}})
    body = json.dumps({"inputs": [_tensor("X", "FP32", 7)]}).encode()
    head = f"POST /v2/models/busy/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    with ServerProcess([repo]) as srv:
        host, port = srv.http_url.split(":")
        for _ in range(10):
            clients = [socket.create_connection((host, int(port)), timeout=10) for _ in range(60)]
            for c in clients:
                c.sendall(head + body)
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
            time.sleep(0.05)  # most are queued behind the one instance now
            for c in clients:
                c.close()
        status, answer = _post(srv, "/v2/models/busy/infer", {"inputs": [_tensor("X", "FP32", 7)]}, {}, 30)
        assert status == 200 and answer["outputs"][0]["data"] == [7], answer
        log = srv.log()
    assert "Traceback" not in log, log[log.index("Traceback") :][:3000]
