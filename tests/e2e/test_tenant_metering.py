"""Token metering per tenant and model against a real server: a Python model that reports its
token counts as response parameters (``prompt_tokens``, ``completion_tokens``) over generate,
KServe HTTP infer and gRPC, and the OpenAI API's ``usage`` (the chat model and its tokenizer);
the counts on ``/metrics`` and ``GET /v2/usage`` are exact. Token limits answer 429 with
``Retry-After`` (OpenAI's error shape on the OpenAI port), and the usage endpoint is an
administrator's."""

from __future__ import annotations

import http.client
import json
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.metrics_text import metric
from tests.plugins.frontend_openai.chat_model import write_chat_model
from tests.python_models import source
from tests.servers import Servers

WORDS_PY = source("tenant_metering_words")
WORDS_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


AUTH = {
    "tenants": {
        "alice": {"keys": [digest("alice-key")]},
        "bob": {"keys": [digest("bob-key")]},
        "admin": {"keys": [digest("admin-key")], "apis": ["inference", "model-repository", "metadata"]},
        "metered": {"keys": [digest("metered-key")], "tokens_per_minute": 5},
        "short": {"keys": [digest("short-key")], "max_prompt_tokens": 3},
    }
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("metering")
    repo = write_repository(root / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": WORDS_PY}})
    write_chat_model(repo, "chat")
    (root / "auth.json").write_text(json.dumps(AUTH))
    return serve(repo, f"--auth-config={root / 'auth.json'}", "--openai-port", "0", "--openai-address", "127.0.0.1")


def _post(address: str, path: str, key: str, body: Any) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection(address, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, raw


def _generate(server: ServerProcess, key: str, text: str) -> tuple[int, dict[str, str], Any]:
    status, headers, raw = _post(server.http_url, "/v2/models/words/generate", key, {"text_input": text})
    return status, headers, json.loads(raw)


def _openai(server: ServerProcess, key: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return _post(f"127.0.0.1:{server.ports['openai']}", "/v1/completions", key, body)


def _usage(server: ServerProcess, key: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("GET", "/v2/usage", headers={"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    return response.status, body


def test_tokens_are_counted_exactly_per_tenant_and_model(server):
    # generate: the model's counts come back as response parameters
    status, _, body = _generate(server, "alice-key", "one two three")
    assert status == 200 and (body["prompt_tokens"], body["completion_tokens"]) == (3, 4), body
    status, _, body = _generate(server, "alice-key", "please fail")
    assert status == 400
    # KServe HTTP infer: the counts are the response's parameters
    tensor = {"name": "text_input", "shape": [1], "datatype": "BYTES", "data": ["four five"]}
    status, _, raw = _post(server.http_url, "/v2/models/words/infer", "alice-key", {"inputs": [tensor]})
    params = json.loads(raw)["parameters"]
    assert status == 200 and (params["prompt_tokens"], params["completion_tokens"]) == (2, 3), params
    # gRPC
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("text_input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"six"], dtype=np.object_))
    result = client.infer("words", [inp], headers={"authorization": "Bearer alice-key"})
    params = result.get_response().parameters
    assert (params["prompt_tokens"].int64_param, params["completion_tokens"].int64_param) == (1, 2)
    # another tenant's request counts for that tenant only
    assert _generate(server, "bob-key", "seven eight")[0] == 200
    # OpenAI: the usage it answers is what is metered, streamed or not
    usages = []
    status, _, raw = _openai(server, "alice-key", {"model": "chat", "prompt": "the quick brown fox", "max_tokens": 4})
    assert status == 200
    usages.append(json.loads(raw)["usage"])
    body = {"model": "chat", "prompt": "alpha beta gamma", "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    status, _, raw = _openai(server, "alice-key", body)
    assert status == 200
    chunks = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]
    usages.append(chunks[-1]["usage"])
    assert all(u["prompt_tokens"] > 0 and u["completion_tokens"] > 0 for u in usages), usages

    def tokens(tenant: str, model: str, kind: str) -> float:
        return metric(server, "inferd_tenant_tokens_total", tenant=tenant, model=model, kind=kind)

    def requests(tenant: str, model: str, outcome: str) -> float:
        return metric(server, "inferd_tenant_model_requests_total", tenant=tenant, model=model, outcome=outcome)

    assert (tokens("alice", "words", "prompt"), tokens("alice", "words", "completion")) == (6, 9)
    assert (requests("alice", "words", "success"), requests("alice", "words", "failure")) == (3, 1)
    assert (tokens("bob", "words", "prompt"), tokens("bob", "words", "completion")) == (2, 3)
    assert tokens("alice", "chat", "prompt") == sum(u["prompt_tokens"] for u in usages)
    assert tokens("alice", "chat", "completion") == sum(u["completion_tokens"] for u in usages)
    assert requests("alice", "chat", "success") == 2
    status, usage = _usage(server, "admin-key")
    assert status == 200
    assert usage["tenants"]["alice"]["models"]["words"] == {
        "success_requests": 3, "failure_requests": 1, "prompt_tokens": 6, "completion_tokens": 9}  # fmt: skip
    assert usage["tenants"]["bob"]["totals"]["prompt_tokens"] == 2


def test_the_usage_endpoint_is_an_administrators(server):
    status, body = _usage(server, "alice-key")
    assert status == 403 and "model-repository" in body["error"], body
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("GET", "/v2/usage")
    assert conn.getresponse().status == 401


def test_tokens_per_minute_answers_429_with_retry_after_on_every_port(server):
    assert _generate(server, "metered-key", "a b c")[0] == 200  # 3 + 4 tokens: over the 5 a minute
    status, headers, body = _generate(server, "metered-key", "a")
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert "tenant 'metered' used its 5 tokens per minute" in body["error"]
    status, headers, raw = _openai(server, "metered-key", {"model": "chat", "prompt": "hello", "max_tokens": 2})
    error = json.loads(raw)["error"]
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
    assert "tokens per minute" in error["message"]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("text_input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("words", [inp], headers={"authorization": "Bearer metered-key"})
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert metric(server, "inferd_tenant_requests_total", tenant="metered", outcome="token_limited") == 3


def test_a_prompt_over_the_tenants_limit_is_refused_on_the_openai_port(server):
    status, _, raw = _openai(server, "short-key", {"model": "chat", "prompt": "the quick brown fox jumps"})
    error = json.loads(raw)["error"]
    assert status == 400 and error["code"] == "prompt_too_long" and error["param"] == "prompt", error
    assert "tenant 'short'" in error["message"] and "max_prompt_tokens" in error["message"]
    status, _, raw = _openai(server, "short-key", {"model": "chat", "prompt": "fox", "max_tokens": 2})
    assert status == 200, raw


def test_usage_without_tenants_is_empty(tmp_path: Path):
    repo = write_repository(tmp_path / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": WORDS_PY}})
    with ServerProcess([repo]) as proc, urllib.request.urlopen(f"http://{proc.http_url}/v2/usage", timeout=10) as r:
        assert json.loads(r.read()) == {"tenants": {}}


def test_counts_are_the_whole_servers_under_workers(tmp_path: Path):
    """Requests spread over two workers (new connections): /metrics and /v2/usage count them all."""
    repo = write_repository(tmp_path / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": WORDS_PY}})
    (tmp_path / "auth.json").write_text(json.dumps(AUTH))
    with ServerProcess([repo], ["--workers", "2", f"--auth-config={tmp_path / 'auth.json'}"]) as proc:
        pids, sent = set(), 0
        while len(pids) < 2 or sent < 6:
            assert sent < 60, f"the requests did not reach both workers: {pids}"
            status, _, body = _generate(proc, "alice-key", "one two")  # a new connection each
            assert status == 200
            pids.add(body["pid"])
            sent += 1
        prompt = metric(proc, "inferd_tenant_tokens_total", tenant="alice", model="words", kind="prompt")
        completion = metric(proc, "inferd_tenant_tokens_total", tenant="alice", model="words", kind="completion")
        assert (prompt, completion) == (2 * sent, 3 * sent)
        status, usage = _usage(proc, "admin-key")
        assert status == 200
        assert usage["tenants"]["alice"]["totals"] == {
            "success_requests": sent, "failure_requests": 0, "prompt_tokens": 2 * sent, "completion_tokens": 3 * sent}  # fmt: skip
