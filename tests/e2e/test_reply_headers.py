"""Timing and token counts where gateways and billing read them (docs/traffic.md), against a real
``inferd serve``: a gRPC ModelInfer asking ``"timing": true`` gets ``server-timing`` in its
trailing metadata (both transports, both of the h2 transport's paths), with the figures of its
response parameters; a request whose model reports its tokens gets ``x-tokens-used`` (HTTP infer
and generate headers, gRPC trailing metadata), and so does an OpenAI completion (its ``usage``)."""

from __future__ import annotations

import http.client
import json
import re
import struct
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferd.testing import ServerProcess, write_repository
from tests.plugins.frontend_openai.chat_model import write_chat_model
from tests.python_models import source
from tests.servers import Servers

WORDS_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
TIMING_KEYS = ("queue", "compute_input", "infer", "output", "total")
PARAMS = ("timing_queue_us", "timing_compute_input_us", "timing_compute_infer_us", "timing_compute_output_us")


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("reply_headers")
    files = {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}
    repo = write_repository(root / "models", {"words": files})
    write_chat_model(repo, "chat")
    return serve(repo, f"--grpc-transport={request.param}", "--openai-port", "0", "--openai-address", "127.0.0.1")


def _grpc(server: ServerProcess, text: str, timing: bool | None, timeout: float | None) -> tuple[Any, dict[str, str]]:
    request = service_pb2.ModelInferRequest(model_name="words")
    request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", len(text)) + text.encode())
    if timing is not None:
        request.parameters["timing"].bool_param = timing
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response, call = stub.ModelInfer.with_call(request, timeout=timeout)
    return response, dict(call.trailing_metadata() or ())


def _post(address: str, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection(address, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw)


def _durations(value: str) -> dict[str, float]:
    found = dict(re.findall(r"(\w+);dur=([\d.e+-]+)", value))
    return {k: float(v) for k, v in found.items()}


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["plain", "deadline"])  # h2: the short path, and ASGI
def test_grpc_timing_in_trailing_metadata(server: ServerProcess, timeout: float | None) -> None:
    response, trailers = _grpc(server, "one two three", True, timeout)
    params = {k: v.int64_param for k, v in response.parameters.items()}
    durations = _durations(trailers["server-timing"])
    assert set(durations) == set(TIMING_KEYS), trailers
    for name, key in zip(TIMING_KEYS, (*PARAMS, "timing_total_us"), strict=True):
        assert durations[name] == pytest.approx(params[key] / 1000), (name, trailers, params)
    assert durations["infer"] > 0
    # the model's token counts travel with it
    assert trailers["x-tokens-used"] == "prompt=3, completion=4"


@pytest.mark.parametrize("timing", [None, False])
def test_grpc_no_timing_unless_asked(server: ServerProcess, timing: bool | None) -> None:
    _, trailers = _grpc(server, "alpha beta", timing, None)
    assert "server-timing" not in trailers
    assert trailers["x-tokens-used"] == "prompt=2, completion=3"


def test_grpc_a_failed_call_has_no_usage_trailer(server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as failed:
        _grpc(server, "please fail", True, None)
    call = failed.value
    assert "the model refuses" in call.details()  # type: ignore[attr-defined]
    found = dict(call.trailing_metadata() or ())  # type: ignore[attr-defined]
    assert "x-tokens-used" not in found and "server-timing" not in found


def test_http_infer_and_generate_tokens_used_header(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a b c d"]}]}
    status, headers, answer = _post(server.http_url, "/v2/models/words/infer", body)
    assert status == 200 and answer["parameters"]["prompt_tokens"] == 4, answer
    assert headers["x-tokens-used"] == "prompt=4, completion=5" and "server-timing" not in headers
    body["parameters"] = {"timing": True}
    status, headers, answer = _post(server.http_url, "/v2/models/words/infer", body)
    assert status == 200 and set(_durations(headers["server-timing"])) == set(TIMING_KEYS), headers
    status, headers, answer = _post(server.http_url, "/v2/models/words/generate", {"text_input": "x y"})
    assert status == 200 and answer["text_output"] == "X Y DONE"
    assert headers["x-tokens-used"] == "prompt=2, completion=3"
    status, headers, _ = _post(server.http_url, "/v2/models/words/generate", {"text_input": "fail"})
    assert status == 400 and "x-tokens-used" not in headers


def test_openai_completion_tokens_used_header(server: ServerProcess) -> None:
    address = f"127.0.0.1:{server.ports['openai']}"
    body = {"model": "chat", "messages": [{"role": "user", "content": "the quick brown fox"}], "max_tokens": 4}
    status, headers, answer = _post(address, "/v1/chat/completions", body)
    assert status == 200, answer
    usage = answer["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, usage
    assert headers["x-tokens-used"] == f"prompt={usage['prompt_tokens']}, completion={usage['completion_tokens']}"
    status, headers, answer = _post(address, "/v1/completions", {"model": "chat", "prompt": "hello", "max_tokens": 2})
    assert status == 200
    usage = answer["usage"]
    assert headers["x-tokens-used"] == f"prompt={usage['prompt_tokens']}, completion={usage['completion_tokens']}"
