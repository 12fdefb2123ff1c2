"""Per-request timing (docs/traffic.md, "Per-request timing"), against a real ``inferd serve``: a
request with ``"timing": true`` gets its queue and compute times in its response parameters (HTTP
and gRPC) and a ``Server-Timing`` header (HTTP); one without gets neither."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.release_models import model

KEYS = ("timing_queue_us", "timing_compute_input_us", "timing_compute_infer_us", "timing_compute_output_us")


@pytest.fixture
def server(tmp_path: Path):
    process = ServerProcess([write_repository(tmp_path / "models", {"m": model("m", {1: {}})})], [])
    process.start()
    yield process
    process.stop()


def post(server: ServerProcess, body: dict) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/m/infer", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, dict(reply.headers.items()), json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), json.loads(exc.read())


def body(**params: object) -> dict:
    out: dict = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [3]}]}
    if params:
        out["parameters"] = params
    return out


def test_timing_over_http_in_parameters_and_server_timing(server: ServerProcess) -> None:
    status, headers, answer = post(server, body(timing=True))
    assert status == 200 and answer["outputs"][0]["data"] == [6]
    params = answer["parameters"]
    assert all(type(params[k]) is int and params[k] >= 0 for k in (*KEYS, "timing_total_us")), params
    # the parts add up to at most the whole (the whole also counts decoding and the router)
    assert sum(params[k] for k in KEYS) <= params["timing_total_us"] + 4  # each part rounded down: 1 us each
    assert params["timing_compute_infer_us"] > 0
    timing = headers["server-timing"]
    found = dict(re.findall(r"(\w+);dur=([\d.e+-]+)", timing))
    assert set(found) == {"queue", "compute_input", "infer", "output", "total"}, timing
    assert float(found["infer"]) == pytest.approx(params["timing_compute_infer_us"] / 1000)
    status, headers, answer = post(server, body())  # not asked: nothing
    assert status == 200 and "server-timing" not in headers and "timing_total_us" not in answer.get("parameters", {})
    status, headers, answer = post(server, body(timing=False))
    assert status == 200 and "server-timing" not in headers and "parameters" not in answer


def test_timing_over_grpc_in_response_parameters(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([3], np.int32))
    response = client.infer("m", [x], parameters={"timing": True}).get_response()
    params = {k: v.int64_param for k, v in response.parameters.items()}
    assert set(params) == {*KEYS, "timing_total_us"} and params["timing_compute_infer_us"] > 0, params
    plain = client.infer("m", [x]).get_response()
    assert not any(k.startswith("timing_") for k in plain.parameters)


def test_a_timing_parameter_that_is_not_a_boolean_is_refused(server: ServerProcess) -> None:
    status, _, answer = post(server, body(timing="yes"))
    assert status == 400 and "request parameter 'timing' must be true or false" in answer["error"], answer
