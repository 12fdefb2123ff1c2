"""Isolated Python models under ``inferd serve --workers 2``: each worker supervises its own stubs.

One server: ``healthy`` (in-process echo) and ``boom`` (isolated, one instance per worker; IN 1 segfaults,
IN 2 writes its pid to BUSY and blocks 60 s in native code holding the GIL, else echo+1). Requests go over a new connection each, so
the kernel spreads them over both workers.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.background import Background
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
ECHO_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy() + 1)]) for r in requests]
"""
BOOM_PY = source("python_backend_isolation_workers_boom")
BOOM_PARAMS = """
parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "healthy": {"config.pbtxt": CONFIG, "1/model.py": ECHO_PY},
        "boom": {"config.pbtxt": CONFIG + BOOM_PARAMS, "1/model.py": BOOM_PY},
    }
    return serve(repo, "--workers", "2")


def _infer(server: ServerProcess, model: str, n: int, timeout: float = 60) -> tuple[int, str]:
    """(status, OUT or the error) over a new connection."""
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=timeout)
    try:
        body = json.dumps({"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [n]}]})
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
    finally:
        conn.close()
    if response.status != 200:
        return response.status, answer.get("error", "")
    return response.status, answer["outputs"][0]["data"][0]


def _load(server: ServerProcess) -> Background:
    """Keeps ``healthy`` busy from a thread, a new connection per request; counts failures."""

    def ask(i: int) -> None:
        answer = _infer(server, "healthy", i)
        assert answer == (200, i + 1), answer

    return Background(ask)


def _serving(server: ServerProcess, model: str, times: int = 8, timeout: float = 120) -> None:
    """Wait until ``times`` requests in a row (spread over the workers) are answered."""
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < times:
        assert time.monotonic() < deadline, f"{model} did not come back in every worker"
        try:
            streak = streak + 1 if _infer(server, model, 5) == (200, 6) else 0
        except OSError:  # a worker being replaced
            streak = 0
        if not streak:
            time.sleep(0.1)


def test_a_crash_in_one_workers_stub_fails_only_its_request_and_the_stub_comes_back(server):
    _serving(server, "boom")
    with _load(server) as load:
        for _ in range(3):
            status, error = _infer(server, "boom", 1)
            deadline = time.monotonic() + 60
            while status == 503 and "is restarting" in error and time.monotonic() < deadline:
                # the streak _serving saw may all have come from the other worker, whose stub is up
                time.sleep(0.2)
                status, error = _infer(server, "boom", 1)
            assert status == 500 and "is not healthy.; it was killed by signal 11 (SIGSEGV)" in error, error
            _serving(server, "boom")
    assert load.failures == [], load.failures[:5]
    assert load.ok > 10


def test_a_worker_killed_with_sigkill_leaves_no_stub_behind(server):
    busy = server.repositories[0] / "boom" / "BUSY"
    busy.unlink(missing_ok=True)
    deadline = time.monotonic() + 60
    answers: list[tuple[int, str]] = []
    threading.Thread(target=_infer_until_busy, args=(server, busy, deadline, answers), daemon=True).start()
    while not busy.exists() or not busy.read_text():
        assert time.monotonic() < deadline, f"the model never started its long execute; answers: {answers}"
        time.sleep(0.05)
    stub = int(busy.read_text())
    with open(f"/proc/{stub}/stat") as f:
        worker = int(f.read().rsplit(")", 1)[1].split()[1])
    assert worker != server.proc.pid  # a worker's stub, not the supervisor's
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _running(stub):
        assert time.monotonic() < deadline, f"stub {stub} outlived its worker {worker}"
        time.sleep(0.05)
    _serving(server, "healthy")  # the supervisor replaced the worker
    _serving(server, "boom")


def _infer_until_busy(server: ServerProcess, busy: Path, deadline: float, answers: list[tuple[int, str]]) -> None:
    """Ask ``boom`` for its long execute until it starts one: a worker whose stub the test before
    crashed may answer that it is restarting it (the answers are kept for the failure message)."""
    while not busy.exists() and time.monotonic() < deadline:
        try:
            answers.append(_infer(server, "boom", 2, timeout=120))
        except OSError:  # its worker is killed
            return
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
