"""A Python model's ``is_ready()`` drives its readiness (Triton 2.6x python_backend), against a real ``inferd serve``.

Each model reads flag files in its model directory in ``is_ready``: NOT_READY (return False), RAISE
(raise), WEIRD (return 1, not a bool), SLOW (sleep 8 s, past the 5 s limit). Every call appends a
byte to CALLS. Input 9 makes ``execute`` hold until the test removes the file RUNNING it wrote.
``gate`` runs in the server, ``gate_iso`` in a stub process, ``gate_async_iso`` has an
``async def is_ready`` in a stub; ``plain`` defines no ``is_ready``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.http_calls import http_call
from tests.python_models import source
from tests.servers import Servers
from tests.waiting import wait_for

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }\n'

MODEL_PY = source("python_backend_is_ready")
SYNC_PY = (
    MODEL_PY
    + """
    def is_ready(self):
        return self.answer()
"""
)
ASYNC_PY = (
    MODEL_PY
    + """
    async def is_ready(self):
        await asyncio.sleep(0)
        return self.answer()
"""
)

# Not ready while the file NOT_READY_<its version> exists.
VERSIONED_PY = (
    MODEL_PY
    + """
    def is_ready(self):
        return not self.flag("NOT_READY_" + self.version)

    def __init__(self):
        self.version = os.path.basename(os.path.dirname(__file__))
"""
)
ALL_VERSIONS = "version_policy: { all { } }\n"

GATED = ["gate", "gate_iso", "gate_async_iso"]


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve(
        {
            "gate": {"config.pbtxt": CONFIG, "1/model.py": SYNC_PY},
            "gate_iso": {"config.pbtxt": CONFIG + PROCESS, "1/model.py": SYNC_PY},
            "gate_async_iso": {"config.pbtxt": CONFIG + PROCESS, "1/model.py": ASYNC_PY},
            "plain": {"config.pbtxt": CONFIG, "1/model.py": MODEL_PY},
            "two": {"config.pbtxt": CONFIG + ALL_VERSIONS, "1/model.py": VERSIONED_PY, "2/model.py": VERSIONED_PY},
        }
    )


@pytest.fixture
def clients(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=120, concurrency=4)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    yield http, grpc
    for model in GATED:
        for flag in ("NOT_READY", "RAISE", "WEIRD", "SLOW", "RUNNING"):
            (server.repositories[0] / model / flag).unlink(missing_ok=True)
    http.close()
    grpc.close()


def _infer(client: httpclient.InferenceServerClient, model: str, n: int) -> int:
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    return int(client.infer(model, [x]).as_numpy("OUT")[0])


def _status(url: str) -> int:
    return http_call(url, timeout=120)[0]


def _calls(server, model: str) -> int:
    calls = server.repositories[0] / model / "CALLS"
    return len(calls.read_text()) if calls.exists() else 0


def test_every_model_is_ready_and_is_ready_is_asked(server, clients):
    http, grpc = clients
    before = {m: _calls(server, m) for m in GATED}
    for model in [*GATED, "plain"]:
        assert http.is_model_ready(model), model
        assert grpc.is_model_ready(model), model
    assert http.is_server_ready() and grpc.is_server_ready()
    for model in GATED:  # model ready twice, server ready twice (strict readiness asks every model)
        assert _calls(server, model) - before[model] == 4, model


@pytest.mark.parametrize("model", GATED)
def test_is_ready_false_makes_the_model_and_the_server_not_ready(server, clients, model):
    http, grpc = clients
    flag = server.repositories[0] / model / "NOT_READY"
    flag.write_text("")
    assert not http.is_model_ready(model)
    assert not grpc.is_model_ready(model)
    assert not http.is_server_ready() and not grpc.is_server_ready()
    assert http.is_model_ready("plain") and http.is_model_ready("gate" if model != "gate" else "gate_iso")
    # the model still serves (Triton's readiness does not gate requests) and its state stays READY
    assert _infer(http, model, 4) == 5
    row = next(r for r in http.get_model_repository_index() if r["name"] == model)
    assert row["state"] == "READY", row
    flag.unlink()
    assert http.is_model_ready(model) and grpc.is_model_ready(model)
    assert http.is_server_ready()


@pytest.mark.parametrize("model", ["gate", "gate_iso"])
@pytest.mark.parametrize("flag", ["RAISE", "WEIRD"])
def test_an_is_ready_that_raises_or_returns_no_bool_is_not_ready(server, clients, model, flag):
    http, grpc = clients
    path = server.repositories[0] / model / flag
    path.write_text("")
    assert not http.is_model_ready(model)
    assert not grpc.is_model_ready(model)
    assert _infer(http, model, 1) == 2
    path.unlink()
    assert http.is_model_ready(model)
    assert server.proc is not None and server.proc.poll() is None


@pytest.mark.parametrize("model", ["gate", "gate_iso"])
def test_readiness_is_answered_while_execute_runs(server, clients, model):
    http, grpc = clients
    running = server.repositories[0] / model / "RUNNING"
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(_infer, httpclient.InferenceServerClient(server.http_url, network_timeout=120), model, 9)
        try:
            wait_for(running.exists, f"{model}'s execute to start")
            before = _calls(server, model)
            # an answer that waited for the execute to end would time out after 5 s: not ready
            assert http.is_model_ready(model) and grpc.is_model_ready(model)
            assert _calls(server, model) == before + 2
            assert not held.done()
        finally:
            running.unlink(missing_ok=True)
        assert held.result(timeout=120) == 10


@pytest.mark.parametrize("model", ["gate", "gate_iso"])
def test_a_slow_is_ready_fails_the_check_and_runs_once_at_a_time(server, clients, model):
    http, _ = clients
    slow = server.repositories[0] / model / "SLOW"
    slow.write_text("")
    before = _calls(server, model)
    answers: list[int] = []
    url = f"http://{server.http_url}/v2/models/{model}/ready"
    askers = [threading.Thread(target=lambda: answers.append(_status(url))) for _ in range(3)]
    for t in askers:
        t.start()
    for t in askers:
        t.join(timeout=120)
    assert answers == [400, 400, 400]  # each gave up after 5 s
    assert _calls(server, model) == before + 1  # the three asks shared one call
    slow.unlink()
    wait_for(lambda: http.is_model_ready(model), f"{model} to answer ready again")  # the late answer counts


def test_with_workers_server_readiness_asks_every_workers_instance(tmp_path):
    """With --workers 2 server readiness asks each worker's instance (a peer's ready answer runs the
    checks on its own loop); model readiness asks the worker that took the request."""
    repo = write_repository(
        tmp_path / "models", {"gate_iso": {"config.pbtxt": CONFIG + PROCESS, "1/model.py": SYNC_PY}}
    )
    model_dir = repo / "gate_iso"
    calls = model_dir / "CALLS"
    with ServerProcess([repo], ["--workers", "2"]) as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        before = len(calls.read_text()) if calls.exists() else 0
        assert http.is_server_ready()
        assert len(calls.read_text()) - before == 2  # one instance in each worker
        (model_dir / "NOT_READY").write_text("")
        assert not http.is_server_ready() and not http.is_model_ready("gate_iso")
        (model_dir / "NOT_READY").unlink()
        assert http.is_server_ready() and http.is_model_ready("gate_iso")
        http.close()


def test_a_model_with_one_version_ready_keeps_the_server_ready(server, clients):
    """inferd's readiness rule: a model serves while one of its versions does; model ready is per version."""
    http, grpc = clients
    assert http.is_model_ready("two", "1") and http.is_model_ready("two", "2")
    flag = server.repositories[0] / "two" / "NOT_READY_2"
    flag.write_text("")
    try:
        assert not http.is_model_ready("two", "2") and not grpc.is_model_ready("two", "2")
        assert http.is_model_ready("two", "1") and grpc.is_model_ready("two", "1")
        assert http.is_server_ready()
        (server.repositories[0] / "two" / "NOT_READY_1").write_text("")
        assert not http.is_server_ready()
    finally:
        flag.unlink()
        (server.repositories[0] / "two" / "NOT_READY_1").unlink(missing_ok=True)
    assert http.is_server_ready()
