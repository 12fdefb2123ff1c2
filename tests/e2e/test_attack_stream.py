"""ModelStreamInfer under attack: a stream holds at most ``--grpc-stream-max-inflight`` requests in
flight (reading pauses beyond it), a client that never reads its responses holds the server's
memory bounded, and every request of a stream counts against its tenant's limits.

On both gRPC transports (h2, the default, and grpcio), against a real ``inferd serve``.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2

from inferd.auth import digest
from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

#: The per-stream cap the servers here run with.
CAP = 4
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"

ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
"""
ECHO_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy())]) for r in requests]
"""
# Decoupled: each request is answered SECONDS later from a thread of its own, so requests run
# concurrently without bound; PEAK is the most requests the model has held at once so far.
COUNTER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PEAK" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
COUNTER_PY = source("attack_stream_counter")


FREE = {"authorization": "Bearer free-key"}
ONE = {"authorization": "Bearer one-key"}


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers
) -> Iterator[ServerProcess]:
    files = {"config.pbtxt": COUNTER_CONFIG, "1/model.py": COUNTER_PY}
    repo = {"echo": {"config.pbtxt": ECHO_CONFIG, "1/model.py": ECHO_PY}, "counter_cap": files, "counter_tenant": files}
    tenants = {"free": {"keys": [digest("free-key")]}, "one": {"keys": [digest("one-key")], "concurrency": 1}}
    auth = tmp_path_factory.mktemp(f"stream-{request.param}") / "auth.json"
    auth.write_text(json.dumps({"tenants": tenants}))
    # A stream whose client reads nothing is reset 30 s after (h2): the server is not kept that long.
    with serve(
        repo,
        f"--grpc-transport={request.param}",
        f"--grpc-stream-max-inflight={CAP}",
        f"--auth-config={auth}",
        "--exit-timeout-secs=3",
    ) as proc:
        yield proc


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _echo_message(size: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "IN", "UINT8"
    tensor.shape.append(size)
    request.raw_input_contents.append(bytes(size))
    return request.SerializeToString()


def _stream_results(server: ServerProcess, model: str, seconds: list[float], headers: dict[str, str]) -> list:
    """Send one request per entry of ``seconds`` on one stream; (PEAK or None, error text or None) each."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
    try:
        for i, s in enumerate(seconds):
            tensor = grpcclient.InferInput("SECONDS", [1], "FP32")
            tensor.set_data_from_numpy(np.array([s], np.float32))
            client.async_stream_infer(model, [tensor], request_id=str(i))
        answers = [results.get(timeout=60) for _ in seconds]
    finally:
        client.stop_stream()
        client.close()
    return [(None if r is None else int(r.as_numpy("PEAK")[0]), None if e is None else str(e)) for r, e in answers]


def test_a_stream_runs_at_most_its_cap_at_once(server):
    answers = _stream_results(server, "counter_cap", [0.1] * 40, FREE)
    assert all(error is None for _, error in answers), answers
    peak = max(p for p, _ in answers)
    assert peak <= CAP, f"the model held {peak} requests of one stream at once (cap {CAP})"


def test_a_tenant_limited_to_one_cannot_run_two_through_one_stream(server):
    answers = _stream_results(server, "counter_tenant", [0.3] * 6, ONE)
    served = [p for p, error in answers if error is None]
    refused = [error for _, error in answers if error is not None]
    assert served and max(served) <= 1, f"tenant 'one' (concurrency 1) ran {max(served)} at once: {answers}"
    assert refused and all("tenant 'one'" in e and "in flight" in e for e in refused), refused


def test_a_stream_that_never_reads_holds_memory_bounded(server):
    # Warm up (the model and the gRPC paths allocate once), then measure the server's RSS.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("IN", [100_000], "UINT8")
    tensor.set_data_from_numpy(np.zeros(100_000, np.uint8))
    client.infer("echo", [tensor], headers=FREE)
    assert server.proc is not None
    pid = server.proc.pid
    time.sleep(0.5)
    baseline = _rss_bytes(pid)

    message = _echo_message(100_000)
    total, sent = 3000, [0]

    def messages() -> Iterator[bytes]:
        for _ in range(total):
            sent[0] += 1
            yield message

    channel = grpc.insecure_channel(server.grpc_url, options=[("grpc.max_receive_message_length", -1)])
    call = channel.stream_stream(STREAM)(messages(), metadata=tuple(FREE.items()))  # its responses are never read
    peak, last, stalled_since = baseline, -1, time.monotonic()
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and sent[0] < total:
            peak = max(peak, _rss_bytes(pid))
            if sent[0] != last:
                last, stalled_since = sent[0], time.monotonic()
            elif time.monotonic() - stalled_since > 2.0:
                break  # the server stopped reading: the client is held back
            time.sleep(0.05)
        for _ in range(20):  # what the server took is being answered: keep watching a moment
            peak = max(peak, _rss_bytes(pid))
            time.sleep(0.05)
    finally:
        call.cancel()
        channel.close()
    grown = (peak - baseline) / 2**20
    assert grown < 100, f"server RSS grew {grown:.0f} MiB while a stream's {sent[0]} messages went unanswered"
    assert sent[0] < total, "the server read every message of a stream whose client reads nothing"

    # The stream is gone: its requests are answered or dropped, and the server serves as before.
    time.sleep(1.0)
    after = (_rss_bytes(pid) - baseline) / 2**20
    assert after < 100, f"server RSS still {after:.0f} MiB over its baseline after the stream closed"
    result = client.infer("echo", [tensor], headers=FREE)
    assert result.as_numpy("OUT").shape == (100_000,)
    client.close()
