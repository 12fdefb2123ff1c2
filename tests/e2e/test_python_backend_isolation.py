"""Isolated Python models (``EXECUTION_MODE: process``) against a real ``inferd serve``: real crashes.

One server holds a healthy in-process model, a healthy isolated one, ``boom`` (isolated; its
input says how to die: segfault, ``os._exit``, over its memory limit, or an ``execute`` past its
timeout) and ``loop`` (isolated; every execution segfaults; restarts stop after two crashes). A
background client keeps both healthy models busy through every crash and must see no failure.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.background import Background
from tests.metrics_text import scrape
from tests.python_models import source
from tests.servers import Servers

ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }\n'

ECHO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy() + 1)]) for r in requests]
"""

# IN: 1 segfault, 2 os._exit(7), 3 hold 400 MiB (limit 200 MiB), 4 sleep past the 2 s timeout; 5-7 send the
# server what a buggy or hostile stub could, on the stub's own socket (argv[1]), for the batch it runs: 5 results
# whose tensor lies outside the shared ring, 6 results in a shared-memory file it cuts short once sent (mapped
# as is, reading it would kill the server with SIGBUS), 7 1 GiB of results (a sparse file) past its
# MEMORY_LIMIT; 11 results that describe a 64 MiB tensor and send no tensor block (the server once made up the
# array, garbage past the memory limit, and answered with it); 8 logs 20000 lines, then answers; else echo+1.
# While the file GATE (beside config.pbtxt) exists, initialize waits: the test holds a restart with it.
BOOM_PY = source("python_backend_isolation_boom")
BOOM_PARAMS = (
    PROCESS
    + """
parameters { key: "MEMORY_LIMIT" value: { string_value: "200M" } }
parameters { key: "EXECUTE_TIMEOUT_SECS" value: { string_value: "2" } }
parameters { key: "RESTART_LIMIT" value: { string_value: "20" } }
parameters { key: "RESTART_WINDOW_SECS" value: { string_value: "1" } }
"""
)  # crashes over a second apart count alone: each restart waits the first backoff (0.25 s), not up to 10 s
# Isolated identity for FP32 and BYTES tensors of any size (tiny ones inside the message, small ones through a
# shared ring, large ones a shared-memory file of their own).
IDENTITY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "F" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "S" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "F" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "S" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "SUM" data_type: TYPE_FP64 dims: [ 1 ] } ]
"""
IDENTITY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            f = pb_utils.get_input_tensor_by_name(r, "F").as_numpy()
            s = pb_utils.get_input_tensor_by_name(r, "S").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("F", f), pb_utils.Tensor("S", s),
                                                   pb_utils.Tensor("SUM", np.array([f.sum(dtype=np.float64)]))]))
        return out
"""
# In-process; IN 1 blocks execute for 2.5 s, past its 1 s EXECUTE_WARN_SECS.
SLOW_PY = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        if int(pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()[0]) == 1:
            time.sleep(2.5)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy() + 1)]) for r in requests]
"""
SLOW_PARAMS = 'parameters { key: "EXECUTE_WARN_SECS" value: { string_value: "1" } }\n'
# Isolated, on CPU 0 only. IN 0: OUT is the bit mask of the CPUs it may run on. IN 1: polls is_cancelled() for
# up to 30 s; once it turns true, writes how long that took to CANCELLED (beside config.pbtxt) and fails.
CANCEL_PY = source("python_backend_isolation_cancel")
CANCEL_PARAMS = PROCESS + 'parameters { key: "CPU_AFFINITY" value: { string_value: "0" } }\n'
# Isolated; each execute takes 0.5 s.
NAP_PY = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.5)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy() + 1)]) for r in requests]
"""
LOOP_PY = """
import ctypes

class TritonPythonModel:
    def execute(self, requests):
        ctypes.string_at(0)
"""
LOOP_PARAMS = PROCESS + 'parameters { key: "RESTART_LIMIT" value: { string_value: "2" } }\n'


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "healthy": {"config.pbtxt": ECHO_CONFIG, "1/model.py": ECHO_PY},
        "healthy_iso": {"config.pbtxt": ECHO_CONFIG + PROCESS, "1/model.py": ECHO_PY},
        "boom": {"config.pbtxt": ECHO_CONFIG + BOOM_PARAMS, "1/model.py": BOOM_PY},
        "loop": {"config.pbtxt": ECHO_CONFIG + LOOP_PARAMS, "1/model.py": LOOP_PY},
        "slow": {"config.pbtxt": ECHO_CONFIG + SLOW_PARAMS, "1/model.py": SLOW_PY},
        "identity": {"config.pbtxt": IDENTITY_CONFIG + PROCESS, "1/model.py": IDENTITY_PY},
        "cancel": {"config.pbtxt": ECHO_CONFIG + CANCEL_PARAMS, "1/model.py": CANCEL_PY},
        "nap": {"config.pbtxt": ECHO_CONFIG + PROCESS, "1/model.py": NAP_PY},
    }
    return serve(repo)


def _infer(client: httpclient.InferenceServerClient, model: str, n: int) -> int:
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    return int(client.infer(model, [x]).as_numpy("OUT")[0])


def _index(client: httpclient.InferenceServerClient) -> dict[str, dict]:
    return {row["name"]: row for row in client.get_model_repository_index()}


def _wait_ready(client: httpclient.InferenceServerClient, model: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not client.is_model_ready(model):
        assert time.monotonic() < deadline, f"{model} did not come back: {_index(client)[model]}"
        time.sleep(0.1)


def _load(url: str) -> Background:
    """Keeps the healthy models busy from a thread; counts answers and failures."""
    client = httpclient.InferenceServerClient(url)

    def ask(i: int) -> None:
        model = ("healthy", "healthy_iso")[i % 2]
        assert _infer(client, model, i) == i + 1, model

    return Background(ask)


@pytest.mark.parametrize("size", [0, 3, 50_000, 2_000_000, 3_000_000])
def test_tensors_of_every_size_cross_both_ways_intact(server, size):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    f = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    s = np.array([b"x" * (i % 7) + bytes([i % 256]) for i in range(max(1, size // 1000))], np.object_)
    inputs = [httpclient.InferInput("F", [size], "FP32"), httpclient.InferInput("S", [len(s)], "BYTES")]
    inputs[0].set_data_from_numpy(f)
    inputs[1].set_data_from_numpy(s)
    result = client.infer("identity", inputs)
    np.testing.assert_array_equal(result.as_numpy("F"), f)
    assert result.as_numpy("S").tolist() == s.tolist()
    assert result.as_numpy("SUM")[0] == pytest.approx(float(f.sum(dtype=np.float64)))


def test_large_requests_sent_at_once_all_cross_intact(server):
    """Six clients at once with 1 MB inputs: the server hands the stub two large batches at a time
    and sends the others, in order, as those return; none is lost, mixed up or held for good."""
    answers: dict[int, np.ndarray] = {}
    errors: list[str] = []

    def call(i: int) -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        f = np.full(250_000, i, np.float32)
        inputs = [httpclient.InferInput("F", [f.size], "FP32"), httpclient.InferInput("S", [1], "BYTES")]
        inputs[0].set_data_from_numpy(f)
        inputs[1].set_data_from_numpy(np.array([b"s"], np.object_))
        try:
            for _ in range(3):
                answers[i] = client.infer("identity", inputs).as_numpy("F")
        except Exception as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [], errors[:2]
    assert sorted(answers) == list(range(6))
    for i, f in answers.items():
        assert f.shape == (250_000,) and (f == i).all(), i


CRASHES = [
    (1, "was killed by signal 11 (SIGSEGV)"),
    (2, "exited with code 7"),
    (3, "exceeded its memory limit: RSS"),
    (4, "did not return from execute within 2 s (EXECUTE_TIMEOUT_SECS)"),
    (5, "sent a malformed message (Malformed: a tensor block at (1099511627776, 4, 0) outside the ring)"),
    (6, "sent a malformed message (Malformed: a shared-memory file that is not sealed against shrinking)"),
    (7, "sent a malformed message (Malformed: 1073741824 bytes of tensors, more than the 209715200 allowed)"),
    (11, "sent a malformed message (Malformed: a tensor (INT32, 67108864 bytes) in a message without a tensor block)"),
]


def test_crashes_fail_only_their_requests_and_the_instance_comes_back(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    assert _infer(client, "boom", 10) == 11
    mapped = _shared_memory(server)
    with _load(server.http_url) as load:
        for n, cause in CRASHES:
            started = time.monotonic()
            with pytest.raises(InferenceServerException) as failed:
                _infer(client, "boom", n)
            message = str(failed.value)
            assert "model 'boom'" in message and "Stub process 'boom_0' is not healthy." in message, message
            assert cause in message, message
            assert time.monotonic() - started < 25  # failed fast, never hung (the stub would sleep 30 s)
            _wait_ready(client, "boom")
            assert _infer(client, "boom", 20 + n) == 21 + n
        time.sleep(0.5)
    assert load.failures == [], load.failures[:5]
    assert load.ok > 10
    assert client.is_server_live()
    # the dead stubs' shared rings (and their descriptors) went with them: 8 crashes would leave 16 of each
    assert all(after <= before + 2 for before, after in zip(mapped, _shared_memory(server), strict=True))


def _shared_memory(server) -> tuple[int, int]:
    """The server's mappings of, and descriptors open on, shared-memory files of the python backend."""
    maps = Path(f"/proc/{server.proc.pid}/maps").read_text().count("memfd:inferd-python")
    fds = sum("memfd:inferd-python" in os.readlink(fd) for fd in Path(f"/proc/{server.proc.pid}/fd").iterdir())
    return maps, fds


def test_a_batch_waiting_in_the_stub_is_timed_from_when_it_starts(server):
    """The stub gets the next request while one executes (pipelined): the execute timeout (2 s) of the
    second one counts from when the first returned, not from when it was sent (1.2 s + 1.2 s)."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    _wait_ready(client, "boom")
    answers: list[int | str] = []

    def call() -> None:
        try:
            answers.append(_infer(httpclient.InferenceServerClient(server.http_url, network_timeout=60), "boom", 9))
        except InferenceServerException as exc:
            answers.append(str(exc))

    started = time.monotonic()
    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [10, 10], answers
    assert time.monotonic() - started >= 2.4  # one after the other in the stub


def test_a_batch_waiting_in_the_stub_counts_its_wait_as_queue_time(server):
    """Four requests at once all go to the stub (pipelined), which runs them one after the other, 0.5 s
    each: the statistics count each one's wait behind the others as queue time (0 + 0.5 + 1 + 1.5 s),
    and compute_infer only its own execution (4 x 0.5 s; counted from the hand-over: 0.5 + 1 + 1.5 + 2)."""
    together = threading.Barrier(4)
    answers: list[int] = []

    def call(n: int) -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)  # one a thread (gevent)
        together.wait()
        answers.append(_infer(client, "nap", n))

    threads = [threading.Thread(target=call, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [1, 2, 3, 4]
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    stats = client.get_inference_statistics("nap")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 4
    infer_s, queue_s = stats["compute_infer"]["ns"] / 1e9, stats["queue"]["ns"] / 1e9
    assert 1.9 < infer_s < 3.5, stats  # before: 5 s
    assert queue_s > 1.5, stats  # before: ~0


def test_a_stub_flooding_the_log_is_cut_to_its_budget_and_keeps_serving(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    _wait_ready(client, "boom")
    with _load(server.http_url) as load:
        assert _infer(client, "boom", 8) == 9
        deadline = time.monotonic() + 30
        while "log lines from model 'boom'" not in server.log():
            assert _infer(client, "boom", 10) == 11  # a later record reports how many were dropped
            assert time.monotonic() < deadline, server.log()[-2000:]
            time.sleep(0.2)
    assert load.failures == [], load.failures[:5]
    log = server.log_path.read_text(errors="replace")
    assert 0 < log.count("flood ") < 5000  # at most the burst (~2000 short lines) and ~500 a second got through
    assert re.search(r"dropped \d+ log lines from model 'boom' version 1: more than its stubs' log budget", log)


def test_a_restarting_instance_is_not_ready_and_says_why(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    _wait_ready(client, "boom")
    gate = server.repositories[0] / "boom" / "GATE"
    gate.write_text("hold the restart")
    try:
        with pytest.raises(InferenceServerException, match="SIGSEGV"):
            _infer(client, "boom", 1)
        assert not client.is_model_ready("boom")
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert not grpc.is_model_ready("boom")  # Triton 2.6x: a dead stub makes both answers false
        assert not client.is_server_ready() and not grpc.is_server_ready()
        assert client.is_model_ready("healthy_iso") and grpc.is_model_ready("healthy_iso")
        row = _index(client)["boom"]
        assert row["state"] == "UNAVAILABLE" and "instance 'boom_0' is restarting" in row["reason"], row
        assert "SIGSEGV" in row["reason"]
        with pytest.raises(InferenceServerException) as refused:
            _infer(client, "boom", 10)
        assert "Stub process 'boom_0' is not healthy." in str(refused.value)
        assert "is restarting" in str(refused.value)
        assert _infer(client, "healthy_iso", 5) == 6
    finally:
        gate.unlink()
    _wait_ready(client, "boom")
    assert _index(client)["boom"]["state"] == "READY"
    assert grpc.is_model_ready("boom")
    assert _infer(client, "boom", 10) == 11


def test_a_crash_loop_ends_unavailable_with_the_reason(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    with pytest.raises(InferenceServerException, match="SIGSEGV"):
        _infer(client, "loop", 1)
    _wait_ready(client, "loop")
    with pytest.raises(InferenceServerException, match="SIGSEGV"):
        _infer(client, "loop", 1)
    deadline = time.monotonic() + 30
    while "restarts stopped" not in _index(client)["loop"].get("reason", ""):
        assert time.monotonic() < deadline, _index(client)["loop"]
        time.sleep(0.1)
    row = _index(client)["loop"]
    assert row["state"] == "UNAVAILABLE"
    assert "restarts stopped after 2 crashes within 60 s (RESTART_LIMIT 2)" in row["reason"], row
    time.sleep(1.0)  # no restart comes
    assert not client.is_model_ready("loop")
    with pytest.raises(InferenceServerException) as refused:
        _infer(client, "loop", 1)
    assert "Stub process 'loop_0' is not healthy." in str(refused.value) and "UNAVAILABLE" in str(refused.value)
    assert _infer(client, "healthy", 1) == 2 and _infer(client, "healthy_iso", 1) == 2
    assert client.is_model_ready("healthy_iso")


def test_metrics_count_crashes_by_cause_and_restarts(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    _wait_ready(client, "boom")
    text = scrape(server)
    samples = []
    for line in text.splitlines():
        match = re.fullmatch(r"(inferd_python_stub_\w+)\{(.*)\} (\S+)", line)
        if match:
            samples.append(
                (match.group(1), dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))), float(match.group(3)))
            )

    def value(name: str, **labels: str) -> float:
        found = [v for n, got, v in samples if n == name and labels.items() <= got.items()]
        assert found, (name, labels, samples)
        return sum(found)

    boom = {"model": "boom", "version": "1", "instance": "boom_0"}
    for cause in ("signal", "exit", "memory", "timeout"):
        assert value("inferd_python_stub_crashes_total", **boom, cause=cause) >= 1
    assert value("inferd_python_stub_crashes_total", model="loop", cause="signal") == 2
    assert value("inferd_python_stub_restarts_total", **boom) >= 4
    assert value("inferd_python_stub_rss_bytes", model="healthy_iso") > 1_000_000


def test_a_long_in_process_execute_is_reported_once_with_the_model_and_duration(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    assert _infer(client, "slow", 0) == 1
    assert "model 'slow' instance 'slow_0': execute has been running" not in server.log()
    assert _infer(client, "slow", 1) == 2
    deadline = time.monotonic() + 10
    while "model 'slow' instance 'slow_0': execute has been running for" not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.1)
    assert server.log().count("model 'slow' instance 'slow_0': execute has been running for") == 1
    assert "(EXECUTE_WARN_SECS 1)" in server.log()


def test_the_stub_runs_on_the_cpus_of_cpu_affinity(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    assert _infer(client, "cancel", 0) == 0b1  # CPU_AFFINITY "0": os.sched_getaffinity(0) == {0}


def test_a_client_that_goes_away_makes_is_cancelled_true_in_the_stub(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    marker = server.repositories[0] / "cancel" / "CANCELLED"
    body = b'{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]}'
    with socket.create_connection(("127.0.0.1", server.http_port)) as sock:
        sock.sendall(b"POST /v2/models/cancel/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        time.sleep(1.0)  # the model is polling is_cancelled() now; the client gives up
    deadline = time.monotonic() + 20
    while not marker.exists():
        assert time.monotonic() < deadline, "is_cancelled() never turned true in the stub"
        time.sleep(0.1)
    assert _infer(client, "cancel", 0) == 0b1  # the instance is free again at once
