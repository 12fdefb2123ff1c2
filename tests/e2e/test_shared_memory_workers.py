"""Shared memory with ``inferd serve --workers 2``: a region registered through one worker is
usable through every worker, also one restarted after the registration."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from inferd.testing import ServerProcess, write_repository

# Y = 2 X, and PID = the process that served the request.
DOUBLE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
"""
DOUBLE_PY = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2),
                                                   pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))]))
        return out
"""
X = np.array([1.0, -2.0, 3.5, 0.25], np.float32)


@pytest.fixture
def regions() -> Iterator[tuple[Any, Any]]:
    tag = f"/inferd_workers_{os.getpid()}"
    inp = shm.create_shared_memory_region("in", tag + "_in", 16)
    out = shm.create_shared_memory_region("out", tag + "_out", 16)
    shm.set_shared_memory_region(inp, [X])
    yield inp, out
    shm.destroy_shared_memory_region(inp)
    shm.destroy_shared_memory_region(out)


def served_by(url: str, protocol: str, out_handle: Any) -> int:
    """One request over a new connection, X and Y in shared memory; the pid that served it."""
    m = httpclient if protocol == "http" else grpcclient
    client = m.InferenceServerClient(url)
    try:
        x = m.InferInput("X", [4], "FP32")
        x.set_shared_memory("in", 16)
        y = m.InferRequestedOutput("Y")
        y.set_shared_memory("out", 16)
        result = client.infer("double", [x], outputs=[y, m.InferRequestedOutput("PID")])
        np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.float32, [4]), X * 2)
        return int(result.as_numpy("PID")[0])
    finally:
        client.close()


def until_both(ask: Callable[[], int], timeout: float = 60.0) -> set[int]:
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(ask())
    assert len(seen) == 2, seen
    return seen


def test_regions_span_the_workers_and_a_restarted_one(tmp_path: Any, regions: tuple[Any, Any]) -> None:
    inp, out = regions
    repo = write_repository(tmp_path / "models", {"double": {"config.pbtxt": DOUBLE_CONFIG, "1/model.py": DOUBLE_PY}})
    with ServerProcess([repo], ["--workers", "2"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        client.register_system_shared_memory("in", inp._shm_key, 16)
        grpcclient.InferenceServerClient(srv.grpc_url).register_system_shared_memory("out", out._shm_key, 16)
        pids = until_both(lambda: served_by(srv.http_url, "http", out))
        assert until_both(lambda: served_by(srv.grpc_url, "grpc", out)) == pids

        deadline = time.monotonic() + 30  # the supervisor restarts only workers it saw ready
        while "all 2 workers ready" not in srv.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)
        srv.wait_ready(60)
        restarted = until_both(lambda: served_by(srv.http_url, "http", out))
        assert victim not in restarted

        # An unregistration through one worker holds on every worker.
        client.unregister_system_shared_memory("in")
        for _ in range(8):
            fresh = httpclient.InferenceServerClient(srv.http_url)
            assert [r["name"] for r in fresh.get_system_shared_memory_status()] == ["out"]
            fresh.close()
        client.close()
