"""``inferd perf --shared-memory system`` against a live inferd: requests carry region references,
every region is unregistered and removed at the end."""

from __future__ import annotations

import asyncio
import glob
import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from inferd.testing import ServerProcess
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.shm import Placed
from tests.e2e import models
from tests.lazy import lazy_import
from tests.servers import Servers

# the clients' transports (tritonclient's aio clients, aiohttp): loaded by the test that uses them
transport_grpc = lazy_import("inferd.tools.perf.transport_grpc")
transport_http = lazy_import("inferd.tools.perf.transport_http")

TOTALS = re.compile(r"inferd perf: (\d+) requests completed \((\d+) responses\), (\d+) failed")


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()})


def successes(server: ServerProcess) -> int:
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("add_sub")["model_stats"]
    return sum(s["inference_stats"]["success"]["count"] for s in stats)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_with_system_shared_memory(server: ServerProcess, protocol: str) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    before = successes(server)
    run = subprocess.run([sys.executable, "-m", "inferd.host.cli", "perf", "-m", "add_sub", "-u", url, "-i", protocol,
                          "-b", "2", "--shared-memory", "system", "--output-shared-memory-size", "64",
                          "-p", "300", "-r", "3"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    match = TOTALS.search(run.stdout)
    assert match, run.stdout
    completed, failed = int(match[1]), int(match[3])
    assert failed == 0 and completed > 0
    assert successes(server) - before == completed
    assert httpclient.InferenceServerClient(server.http_url).get_system_shared_memory_status() == []
    assert glob.glob("/dev/shm/inferd_perf_*") == []


def test_an_output_region_too_small_fails_the_requests(server: ServerProcess) -> None:
    run = subprocess.run([sys.executable, "-m", "inferd.host.cli", "perf", "-m", "add_sub", "-u", server.http_url,
                          "-b", "2", "--shared-memory", "system", "--output-shared-memory-size", "16",
                          "-p", "200", "-r", "1"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode != 0
    assert "should be at least 32 bytes to hold the results" in run.stdout + run.stderr
    assert glob.glob("/dev/shm/inferd_perf_*") == []  # removed on the way out, failure or not


def test_requests_name_the_regions() -> None:
    asyncio.run(_requests_name_the_regions())


async def _requests_name_the_regions() -> None:
    placed = Placed({"INPUT0": ("r0", 16)}, {"OUTPUT0": ("r9", 64)})
    datatypes = {"INPUT0": "FP32"}
    entry = {"INPUT0": np.zeros((1, 4), np.float32)}
    http_transport = transport_http.HttpTransport(PerfOptions(model="m", shared_memory="system"))
    http = http_transport.prepare(entry, datatypes, placed)
    await http_transport.close()
    assert http.blob == b"" and b"inference-header-content-length" not in http.wire.lower()
    head = json.loads(http.wire.split(b"\r\n\r\n", 1)[1])
    assert head["inputs"][0]["parameters"] == {"shared_memory_region": "r0", "shared_memory_byte_size": 16}
    assert head["outputs"] == [{"name": "OUTPUT0",
                                "parameters": {"shared_memory_region": "r9", "shared_memory_byte_size": 64}}]  # fmt: skip
    grpc_transport = transport_grpc.GrpcTransport(PerfOptions(model="m", protocol="grpc", shared_memory="system"))
    grpc_wire = grpc_transport.prepare(entry, datatypes, placed)
    await grpc_transport.close()
    msg = service_pb2.ModelInferRequest.FromString(grpc_wire)
    assert len(msg.raw_input_contents) == 0
    assert msg.inputs[0].parameters["shared_memory_region"].string_param == "r0"
    assert msg.outputs[0].parameters["shared_memory_byte_size"].int64_param == 64
