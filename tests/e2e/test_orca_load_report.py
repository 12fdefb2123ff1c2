"""ORCA load reports: an infer call asking with ``endpoint-load-metrics-format: json|text`` gets an
``endpoint-load-metrics`` response header (HTTP) or trailing metadata (gRPC, both transports and
both of the h2 transport's paths) with the server's queued and in-flight requests while a Python
model holds some; a call that does not ask, or asks for a format ORCA has not, gets none."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.python_models import source
from tests.servers import Servers
from tests.waiting import wait_for

GATE_PY = source("routing_gate")
BODY = b'{"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[7]}]}'
HELD = 3  # requests the gate holds: one executes, two wait


def _config(name: str, folder: Path) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
"""


def parse(value: str) -> dict[str, float]:
    """An ``endpoint-load-metrics`` value as ORCA defines its two encodings: ``TEXT k=v, ...`` (map
    fields as ``named_metrics.<name>``) or ``JSON {...}``; the named metrics."""
    kind, _, rest = value.partition(" ")
    if kind == "JSON":
        return {k: float(v) for k, v in json.loads(rest)["named_metrics"].items()}
    assert kind == "TEXT", value
    out = {}
    for pair in rest.split(","):
        key, _, number = pair.strip().partition("=")
        assert key.startswith("named_metrics."), pair
        out[key.removeprefix("named_metrics.")] = float(number)
    return out


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def held(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers):
    """A server whose ``gate`` holds :data:`HELD` requests (``free`` answers at once), and the threads."""
    root = tmp_path_factory.mktemp("orca")
    (root / "gate").mkdir()
    (root / "free").mkdir()
    (root / "free" / "release").touch()
    repo = {name: {"config.pbtxt": _config(name, root / name), "1/model.py": GATE_PY} for name in ("gate", "free")}
    server = serve(repo, f"--grpc-transport={request.param}")
    url = f"http://{server.http_url}/v2/models/gate/infer"
    threads = [
        threading.Thread(target=http_call, args=(url, "POST", BODY), kwargs={"timeout": 120}) for _ in range(HELD)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(list((root / "gate").glob("started-*"))) == 1, timeout=60, what="the gate executing")
    wait_for(lambda: _http(server, "json").get("pending_requests") == HELD - 1, timeout=60, what="two queued")
    yield server
    (root / "gate" / "release").touch()
    for thread in threads:
        thread.join(120)


def _http(server: ServerProcess, fmt: str | None) -> dict[str, float]:
    headers = {"Content-Type": "application/json"}
    if fmt is not None:
        headers["endpoint-load-metrics-format"] = fmt
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/free/infer", BODY, headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200
        value = response.headers.get("endpoint-load-metrics")
    return {} if value is None else parse(value)


@pytest.mark.parametrize("fmt", ["json", "text", "JSON", "TEXT"])
def test_http_report_in_both_formats(held: ServerProcess, fmt: str) -> None:
    report = _http(held, fmt)
    assert report["pending_requests"] == HELD - 1
    assert report["inflight_requests"] == HELD  # the free call was answered before its report


@pytest.mark.parametrize("fmt", [None, "xml", ""])
def test_http_no_report_unless_asked_in_an_orca_format(held: ServerProcess, fmt: str | None) -> None:
    assert _http(held, fmt) == {}


def _grpc(server: ServerProcess, fmt: str | None, timeout: float | None) -> dict[str, float]:
    request = service_pb2.ModelInferRequest(model_name="free")
    request.inputs.add(name="IN", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([7], dtype=np.int32).tobytes())
    metadata = [] if fmt is None else [("endpoint-load-metrics-format", fmt)]
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        _, call = stub.ModelInfer.with_call(request, metadata=metadata, timeout=timeout)
    found = dict(call.trailing_metadata() or ())
    return parse(found["endpoint-load-metrics"]) if "endpoint-load-metrics" in found else {}


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["plain", "deadline"])  # h2: the short path, and ASGI
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_grpc_report_in_the_trailing_metadata(held: ServerProcess, fmt: str, timeout: float | None) -> None:
    report = _grpc(held, fmt, timeout)
    assert report["pending_requests"] == HELD - 1
    assert report["inflight_requests"] == HELD
    assert _grpc(held, None, timeout) == {}
    assert _grpc(held, "yaml", timeout) == {}
