"""Tenant priorities (``--auth-config`` ``priority`` / ``queue_timeout_ms``) in the dynamic and
sequence batchers, against a real server: a gate model with one instance holds a first request
until the test releases it, requests queue behind it, and the order the model ran them in (its
own counter, returned as ``ORDER``) shows who went first. No timing is asserted."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from inferd.auth import digest
from inferd.testing import ServerProcess
from tests.metrics_text import metric
from tests.python_models import source
from tests.servers import Servers
from tests.waiting import wait_for

GATE_PY = source("tenant_priority_gate")


def _config(name: str, folder: Path, scheduling: str, batch: int = 1) -> str:
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {batch}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "ORDER" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{scheduling}
parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
"""


SEQUENCE = """sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 1 ] } ] }
  ]
}"""


AUTH = {
    "tenants": {
        "interactive": {"keys": [digest("interactive-key")], "priority": 1},
        "batch": {"keys": [digest("batch-key")], "priority": 2},
        "hurried": {"keys": [digest("hurried-key")], "priority": 2, "queue_timeout_ms": 200},
    }
}
MODELS = {  # name -> scheduling
    "gate": "dynamic_batching { }",
    "gate_levels": "dynamic_batching { priority_levels: 2 default_priority_level: 1 }",
    "gate_sequence": SEQUENCE,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> tuple[ServerProcess, Path]:
    root = tmp_path_factory.mktemp("priority")
    repo = {}
    for name, scheduling in MODELS.items():
        (root / name).mkdir()
        repo[name] = {"config.pbtxt": _config(name, root / name, scheduling), "1/model.py": GATE_PY}
    (root / "auth.json").write_text(json.dumps(AUTH))
    return serve(repo, f"--auth-config={root / 'auth.json'}"), root


def _infer(server: ServerProcess, model: str, key: str, value: int, params: dict[str, Any] | None = None,
           sequence: tuple[int, bool, bool] | None = None) -> tuple[int, Any]:  # fmt: skip
    body: dict[str, Any] = {"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "INT32", "data": [value]}]}
    parameters = dict(params or {})
    if sequence is not None:
        parameters.update(sequence_id=sequence[0], sequence_start=sequence[1], sequence_end=sequence[2])
    if parameters:
        body["parameters"] = parameters
    conn = http.client.HTTPConnection(server.http_url, timeout=90)
    conn.request("POST", f"/v2/models/{model}/infer", json.dumps(body), {"Authorization": f"Bearer {key}"})
    response = conn.getresponse()
    doc = json.loads(response.read())
    conn.close()
    return response.status, doc["outputs"][0]["data"][0] if response.status == 200 else doc


def _pending(server: ServerProcess, model: str) -> float:
    return metric(server, "nv_inference_pending_request_count", model=model, version="1")


class _Calls:
    """Requests sent from threads; ``results[label]`` is (status, ORDER or error body)."""

    def __init__(self) -> None:
        self.results: dict[str, tuple[int, Any]] = {}
        self.threads: list[threading.Thread] = []

    def send(self, label: str, *args: Any, **kwargs: Any) -> None:
        def run() -> None:
            self.results[label] = _infer(*args, **kwargs)

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict[str, tuple[int, Any]]:
        for thread in self.threads:
            thread.join(120)
        return self.results


def _hold_gate(server: ServerProcess, folder: Path, model: str, calls: _Calls, **kwargs: Any) -> None:
    for marker in ("started", "release"):
        (folder / model / marker).unlink(missing_ok=True)
    calls.send("gate", server, model, "batch-key", 0, **kwargs)
    wait_for(lambda: (folder / model / "started").exists(), f"{model} to run its first request")


@pytest.mark.parametrize("model", ["gate", "gate_levels"])
def test_a_high_priority_tenant_passes_queued_low_priority_requests(server, model):
    """``gate`` defines no priority levels (the tenants' levels order its queue); ``gate_levels``
    has two, and the batch tenant asks for ``priority: 1`` on each request: it may not raise itself."""
    proc, folder = server
    calls = _Calls()
    _hold_gate(proc, folder, model, calls)
    params = {"priority": 1} if model == "gate_levels" else None
    for i in range(3):
        calls.send(f"low{i}", proc, model, "batch-key", 1, params)
        wait_for(lambda i=i: _pending(proc, model) >= i + 1, f"low request {i} to queue")
    calls.send("high", proc, model, "interactive-key", 1)
    wait_for(lambda: _pending(proc, model) >= 4, "the high-priority request to queue")
    (folder / model / "release").touch()
    results = calls.join()
    assert all(status == 200 for status, _ in results.values()), results
    assert results["gate"][1] < results["high"][1], results
    assert results["high"][1] < min(results[f"low{i}"][1] for i in range(3)), results


def test_a_tenant_queue_timeout_rejects_its_waiting_request(server):
    proc, folder = server
    calls = _Calls()
    _hold_gate(proc, folder, "gate", calls)
    try:
        status, body = _infer(proc, "gate", "hurried-key", 1)  # waits behind the gate for 200 ms, then leaves
    finally:
        (folder / "gate" / "release").touch()
    calls.join()
    assert status == 503 and body["error"].startswith("Request timeout expired"), (status, body)


def test_a_high_priority_sequence_takes_the_next_free_slot(server):
    proc, folder = server
    calls = _Calls()
    _hold_gate(proc, folder, "gate_sequence", calls, sequence=(100, True, True))
    calls.send("low", proc, "gate_sequence", "batch-key", 1, sequence=(101, True, True))
    wait_for(lambda: _pending(proc, "gate_sequence") >= 1, "the low-priority sequence to wait for the slot")
    calls.send("high", proc, "gate_sequence", "interactive-key", 1, sequence=(102, True, True))
    wait_for(lambda: _pending(proc, "gate_sequence") >= 2, "both sequences to wait for the slot")
    (folder / "gate_sequence" / "release").touch()
    results = calls.join()
    assert all(status == 200 for status, _ in results.values()), results
    assert results["gate"][1] < results["high"][1] < results["low"][1], results


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("priority", 0, "tenant 'bad': 'priority' must be an integer >= 1, got 0"),
        ("priority", -2, "tenant 'bad': 'priority' must be an integer >= 1, got -2"),
        ("priority", 1.5, "tenant 'bad': 'priority' must be an integer >= 1, got 1.5"),
        ("priority", "high", "tenant 'bad': 'priority' must be an integer >= 1, got 'high'"),
        ("queue_timeout_ms", -1, "tenant 'bad': 'queue_timeout_ms' must be a number > 0, got -1"),
        ("tokens_per_minute", 0, "tenant 'bad': 'tokens_per_minute' must be an integer >= 1, got 0"),
        ("max_prompt_tokens", True, "tenant 'bad': 'max_prompt_tokens' must be an integer >= 1, got True"),
    ],
)
def test_bad_priority_or_token_values_stop_the_start(tmp_path, field, value, expected):
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"tenants": {"bad": {"keys": [digest("k")], field: value}}}))
    cmd = [
        sys.executable,
        "-m",
        "inferd.host.cli",
        "serve",
        "--model-repository",
        str(tmp_path),
        f"--auth-config={auth}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
