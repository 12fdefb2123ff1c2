"""The latency histogram per tenant, model and priority (docs/metrics.md, "Tenant metering"),
against a real ``inferd serve`` with API keys: each request a tenant's key sends (KServe HTTP,
gRPC, generate, the OpenAI API; failures too) is one observation under its tenant, the model it
named and the tenant's priority (``none`` without one); the buckets are cumulative, and the sum
is no more than the time the client waited."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.metrics_text import samples, scrape
from tests.plugins.frontend_openai.chat_model import write_chat_model
from tests.python_models import source
from tests.servers import Servers

FAMILY = "inferd_tenant_request_latency_seconds"
WORDS_CONFIG = """
name: "words"
backend: "python"
max_batch_size: 0
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
AUTH = {
    "tenants": {
        "fast": {"keys": [digest("fast-key")], "priority": 1},
        "slow": {"keys": [digest("slow-key")], "priority": 3},
        "plain": {"keys": [digest("plain-key")]},
    }
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("tenant_latency")
    repo = write_repository(
        root / "models", {"words": {"config.pbtxt": WORDS_CONFIG, "1/model.py": source("tenant_metering_words")}}
    )
    write_chat_model(repo, "chat")
    (root / "auth.json").write_text(json.dumps(AUTH))
    return serve(repo, f"--auth-config={root / 'auth.json'}", "--openai-port", "0", "--openai-address", "127.0.0.1")


def _post(address: str, path: str, key: str, body: Any) -> int:
    conn = http.client.HTTPConnection(address, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return status


def _grpc(server: ServerProcess, key: str, text: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inp = grpcclient.InferInput("text_input", [1], "BYTES")
    inp.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    client.infer("words", [inp], headers={"authorization": f"Bearer {key}"})


def _histogram(text: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """By (tenant, model, priority): the buckets (le -> count), count and sum."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for suffix in ("_bucket", "_count", "_sum"):
        for labels, value in samples(text, FAMILY + suffix):
            key = (labels["tenant"], labels["model"], labels["priority"])
            entry = out.setdefault(key, {"buckets": {}})
            if suffix == "_bucket":
                entry["buckets"][labels["le"]] = value
            else:
                entry[suffix[1:]] = value
    return out


def test_latency_by_tenant_model_and_priority(server: ServerProcess) -> None:
    assert FAMILY not in scrape(server)  # no request yet: no family
    started = time.monotonic()
    for _ in range(3):
        assert _post(server.http_url, "/v2/models/words/generate", "fast-key", {"text_input": "a b"}) == 200
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    assert _post(server.http_url, "/v2/models/words/infer", "slow-key", body) == 200
    _grpc(server, "slow-key", "b c")
    with pytest.raises(InferenceServerException, match="the model refuses"):
        _grpc(server, "plain-key", "please fail")  # a failure is observed too
    openai = f"127.0.0.1:{server.ports['openai']}"
    assert _post(openai, "/v1/completions", "plain-key", {"model": "chat", "prompt": "hello", "max_tokens": 2}) == 200
    waited = time.monotonic() - started
    # an unknown model (404 under access rules: unknown and hidden alike) is not observed
    assert _post(server.http_url, "/v2/models/nothing/infer", "plain-key", body) == 404

    found = _histogram(scrape(server))
    counts = {key: entry["count"] for key, entry in found.items()}
    assert counts == {
        ("fast", "words", "1"): 3,
        ("slow", "words", "3"): 2,
        ("plain", "words", "none"): 1,
        ("plain", "chat", "none"): 1,
    }, counts
    total = 0.0
    for key, entry in found.items():
        buckets = [entry["buckets"][le] for le in sorted(entry["buckets"], key=float)]
        assert buckets == sorted(buckets) and buckets[-1] == entry["count"], (key, entry)
        assert float(min(entry["buckets"], key=float)) == 0.001 and "+Inf" in entry["buckets"]
        assert entry["sum"] > 0, (key, entry)
        total += entry["sum"]
    assert total <= waited, (total, waited)  # each observation lies within the client's wait
