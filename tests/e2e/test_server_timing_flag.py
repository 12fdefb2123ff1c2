"""``--server-timing`` (docs/traffic.md, "Per-request timing") against a real ``inferd serve``:
every request is timed as if it asked ``"timing": true`` (HTTP header, gRPC trailing metadata on
both transports, response parameters); a request asking ``"timing": false`` is not; a bad value
is still refused."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess, write_repository
from tests.e2e.release_models import model
from tests.servers import Servers

NAMES = {"queue", "compute_input", "infer", "output", "total"}


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    repo = write_repository(tmp_path_factory.mktemp("server_timing") / "models", {"m": model("m", {1: {}})})
    return serve(repo, "--server-timing", f"--grpc-transport={request.param}")


def _post(server: ServerProcess, params: dict | None) -> tuple[int, dict[str, str], dict]:
    body: dict = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [3]}]}
    if params is not None:
        body["parameters"] = params
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/m/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}, json.loads(exc.read())


def _names(value: str) -> set[str]:
    return set(re.findall(r"(\w+);dur=[\d.e+-]+", value))


def test_every_http_request_is_timed(server: ServerProcess) -> None:
    status, headers, answer = _post(server, None)
    assert status == 200 and answer["outputs"][0]["data"] == [6]
    assert _names(headers["server-timing"]) == NAMES and answer["parameters"]["timing_compute_infer_us"] > 0
    status, headers, answer = _post(server, {"timing": False})
    assert status == 200 and "server-timing" not in headers and "parameters" not in answer
    status, _, answer = _post(server, {"timing": 1})
    assert status == 400 and "request parameter 'timing' must be true or false" in answer["error"]


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["plain", "deadline"])
def test_every_grpc_request_is_timed(server: ServerProcess, timeout: float | None) -> None:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="X", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([3], np.int32).tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response, call = stub.ModelInfer.with_call(request, timeout=timeout)
    trailers = dict(call.trailing_metadata() or ())
    assert _names(trailers["server-timing"]) == NAMES, trailers
    assert response.parameters["timing_total_us"].int64_param > 0
