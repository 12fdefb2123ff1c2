"""Weighted versions and the canary policy, against a real ``inferd serve`` (docs/traffic.md)."""

from __future__ import annotations

import json
import math
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.traffic_models import CONFIG, call, parameters, pipelined, versions_of
from tests.metrics_text import metric

MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])
        self.fail_every = {fail_every}
        self.seen = 0

    def execute(self, requests):
        out = []
        for r in requests:
            self.seen += 1
            if self.fail_every and self.seen % self.fail_every == 0:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("canary broke")))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("V", np.array([self.version], np.int32))]))
        return out
"""


def model_files(name: str, versions: dict[int, int], **params: str) -> dict[str, str]:
    """A model whose version ``v`` fails every ``versions[v]``-th request (0: never)."""
    files = {"config.pbtxt": CONFIG.format(name=name, parameters=parameters(**params))}
    files.update({f"{v}/model.py": MODEL_PY.format(fail_every=f) for v, f in versions.items()})
    files["config.pbtxt"] += "version_policy: { all: {} }\n"
    return files


def infer_body(request_id: str = "") -> bytes:
    body: dict[str, Any] = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}]}
    if request_id:
        body["id"] = request_id
    return json.dumps(body).encode()


@pytest.fixture
def start(tmp_path: Path):
    servers: list[ServerProcess] = []

    def run(models: dict[str, dict[str, str]], *args: str) -> ServerProcess:
        server = ServerProcess([write_repository(tmp_path / "models", models)], list(args))
        servers.append(server.start())
        return server

    yield run
    for server in servers:
        server.stop()


def test_99_1_split_within_binomial_bounds_and_ids_stick(start) -> None:
    server = start({"m": model_files("m", {1: 0, 2: 0}, traffic_split="1:99,2:1")})
    n = 8_000
    counts: dict[str, int] = {}
    for v in versions_of(pipelined(server, "m", [infer_body()] * n)):
        counts[v] = counts.get(v, 0) + 1
    assert "failed" not in counts
    # canary share 1 %: mean 80, sigma ~8.9; 5 sigma refuses a share under 0.45 % or over 1.55 %
    p, sigma = 0.01, math.sqrt(n * 0.01 * 0.99)
    assert abs(counts.get("2", 0) - n * p) <= 5 * sigma, counts
    # the same id lands on the same version, every time and over gRPC too
    ids = [f"user-{i}" for i in range(400)]
    first = versions_of(pipelined(server, "m", [infer_body(i) for i in ids]))
    again = versions_of(pipelined(server, "m", [infer_body(i) for i in ids]))
    assert first == again and set(first) == {"1", "2"}, first
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    for request_id, version in list(zip(ids, first, strict=True))[:40]:
        result = client.infer("m", [x], request_id=request_id)
        assert result.get_response().model_version == version
        assert int(result.as_numpy("V")[0]) == int(version)
    # a request naming a version goes to it
    status, body = pipelined(server, "m", [infer_body()], 1)[0]
    assert status == 200
    code, shown = call(server, "GET", "/v2/models/m/traffic")
    assert code == 200 and shown["weights"] == {"1": 99, "2": 1}
    assert shown["versions"]["1"]["state"] == "stable" and shown["versions"]["2"]["state"] == "canary"
    assert shown["source"] == "config"


def test_weight_change_under_traffic_fails_nothing(start) -> None:
    server = start({"m": model_files("m", {1: 0, 2: 0})})
    code, shown = call(server, "POST", "/v2/models/m/traffic", {"weights": {"1": 100, "2": 0}})
    assert code == 200, shown
    replies: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            replies.extend(pipelined(server, "m", [infer_body()] * 50, 50))

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        time.sleep(0.5)
        for weights in ({"1": 50, "2": 50}, {"1": 0, "2": 100}, {"1": 90, "2": 10}, {"1": 1, "2": 0}):
            assert call(server, "POST", "/v2/models/m/traffic", {"weights": weights})[0] == 200
            time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    seen = versions_of(replies)
    assert "failed" not in seen and {"1", "2"} <= set(seen)
    # after the last change every unversioned request goes to version 1 (not the highest)
    assert set(versions_of(pipelined(server, "m", [infer_body()] * 200))) == {"1"}


def test_bad_traffic_requests_are_refused(start) -> None:
    server = start({"m": model_files("m", {1: 0, 2: 0})})
    cases = [
        ("m", {"weights": {"3": 1, "1": 1}}, 404, "version 3 is not found"),
        ("m", {"weights": {"1": -1, "2": 1}}, 400, "must be an integer from 0 to 1000000"),
        ("m", {"weights": {"1": 1.5, "2": 1}}, 400, "must be an integer from 0 to 1000000"),
        ("m", {"weights": {"x": 1}}, 400, "'x' is not a version number"),
        ("m", {"weights": {"1": 0, "2": 0}}, 400, "all 0"),
        ("m", {"weights": {}}, 400, "non-empty"),
        ("m", {"split": 1}, 400, '"weights"'),
        ("nope", {"weights": {"1": 1}}, 404, "nope"),
    ]
    for model, body, status, text in cases:
        code, reply = call(server, "POST", f"/v2/models/{model}/traffic", body)
        assert code == status and text in reply["error"], (body, code, reply)
    code, reply = call(server, "GET", "/v2/models/nope/traffic")
    assert code == 404 and "nope" in reply["error"]
    code, reply = call(server, "GET", "/v2/models/m/traffic")
    assert code == 200 and reply["weights"] == {}


def until(condition, what: str, server: ServerProcess, model: str, timeout: float = 90.0) -> list[tuple[int, bytes]]:
    """Send unversioned requests in batches until ``condition()`` holds; every reply."""
    replies: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, (
            f"{what}: not within {timeout} s: {call(server, 'GET', '/v2/models/' + model + '/traffic')}"
        )
        replies.extend(pipelined(server, model, [infer_body()] * 100, 100))
    return replies


def test_failing_canary_is_rolled_back(start) -> None:
    # latency is judged too, but on a busy machine a handful of slow requests is noise: a wide p95 slack
    params = {"canary_window_s": "4", "canary_min_requests": "60", "canary_p95_slack_ms": "5000"}
    server = start({"c": model_files("c", {1: 0, 2: 10}, traffic_split="1:50,2:50", **params)})

    def rolled_back() -> bool:
        return call(server, "GET", "/v2/models/c/traffic")[1]["versions"]["2"]["state"] == "rolled back"

    replies = until(rolled_back, "the canary rolled back", server, "c")
    assert any(status != 200 for status, _ in replies)  # the canary did fail some
    after = pipelined(server, "c", [infer_body()] * 300)
    assert set(versions_of(after)) == {"1"}  # weight 0: nothing reaches it, nothing fails
    shown = call(server, "GET", "/v2/models/c/traffic")[1]
    assert shown["weights"] == {"1": 50, "2": 0} and shown["versions"]["2"]["rollbacks"] == 1
    decision = shown["decisions"][-1]
    assert decision["action"] == "rollback" and decision["canary_version"] == 2 and decision["window_s"] == 4
    assert decision["canary"]["failure_rate"] > 0.05 and decision["stable"]["failures"] == 0
    assert "failure rate" in decision["verdict"] and "roll back when" in decision["rule"]
    # the stable version failed nothing; the event is in the stats, the index, the metric and the log
    stats = {s["version"]: s for s in call(server, "GET", "/v2/models/c/stats")[1]["model_stats"]}
    assert stats["1"]["inference_stats"]["fail"]["count"] == 0 and stats["1"]["inference_stats"]["success"]["count"]
    assert stats["2"]["traffic"] == {"state": "rolled back", "weight": 0, "rollbacks": 1, "promotions": 0}
    index = {r["version"]: r for r in call(server, "POST", "/v2/repository/index", {})[1]}
    assert index["2"]["traffic"] == "rolled back (weight 0)" and "failure rate" in index["2"]["reason"]
    assert index["1"]["traffic"] == "stable (weight 50)"
    assert metric(server, "inferd_canary_rollbacks_total", model="c", version="2") == 1
    assert metric(server, "inferd_traffic_weight", model="c", version="2") == 0
    assert re.search(r"model 'c': canary version 2 rolled back: failure rate", server.log())


def test_healthy_canary_is_promoted_step_by_step(start) -> None:
    params = {"canary_window_s": "2", "canary_min_requests": "10", "canary_promote_steps": "1,5,25,100",
              "canary_p95_slack_ms": "5000"}  # fmt: skip
    server = start({"p": model_files("p", {1: 0, 2: 0}, traffic_split="1:99,2:1", **params)})

    def promoted() -> bool:
        return call(server, "GET", "/v2/models/p/traffic")[1]["versions"]["2"]["state"] == "promoted"

    replies = until(promoted, "the canary promoted", server, "p", timeout=120)
    assert all(status == 200 for status, _ in replies)
    shown = call(server, "GET", "/v2/models/p/traffic")[1]
    steps = [d["weights"] for d in shown["decisions"] if d["action"] == "promote"]
    assert steps == [{"1": 95, "2": 5}, {"1": 75, "2": 25}, {"1": 0, "2": 100}], steps
    assert shown["versions"]["1"]["state"] == "off" and shown["versions"]["2"]["promotions"] == 3
    assert set(versions_of(pipelined(server, "p", [infer_body()] * 200))) == {"2"}
    assert metric(server, "inferd_canary_promotions_total", model="p", version="2") == 3


ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "m" model_version: -1
  input_map { key: "X" value: "X" } output_map { key: "V" value: "V" }
} ] }
"""


@pytest.mark.parametrize("transport", ["grpcio", "h2"])
def test_grpc_traffic_service_and_ensemble_steps_follow_the_split(start, transport: str) -> None:
    import grpc

    from inferd.frontends.grpc import traffic_pb2, traffic_pb2_grpc

    models = {"m": model_files("m", {1: 0, 2: 0}), "ens": {"config.pbtxt": ENSEMBLE, "1/.keep": ""}}
    server = start(models, "--grpc-transport", transport)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = traffic_pb2_grpc.TrafficStub(channel)
        reply = stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="m", weights={"1": 5, "2": 0}))
        assert dict(reply.weights) == {"1": 5, "2": 0} and reply.states["1"] == "stable"
        assert json.loads(reply.json)["versions"]["1"]["share"] == 1.0
        assert dict(stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="m")).weights) == {"1": 5, "2": 0}
        bad = [({"name": "m", "weights": {"7": 1}}, grpc.StatusCode.NOT_FOUND, "version 7 is not found"),
               ({"name": "m", "weights": {"1": 0, "2": 0}}, grpc.StatusCode.INVALID_ARGUMENT, "all 0"),
               ({"name": "m", "weights": {"1": -3}}, grpc.StatusCode.INVALID_ARGUMENT, "integer from 0"),
               ({"name": "nope"}, grpc.StatusCode.NOT_FOUND, "nope")]  # fmt: skip
        for fields, code, text in bad:
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(**fields))
            assert caught.value.code() == code and text in caught.value.details(), caught.value
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    for _ in range(20):  # unary, and through the ensemble's step that names no version (not the highest: 2)
        result = client.infer("m", [x])
        assert result.get_response().model_version == "1" and int(result.as_numpy("V")[0]) == 1
        assert int(client.infer("ens", [x]).as_numpy("V")[0]) == 1
    assert int(client.infer("m", [x], model_version="2").as_numpy("V")[0]) == 2  # a named version is kept
    answers: list[Any] = []
    client.start_stream(callback=lambda result, error: answers.append(error or result))
    for _ in range(20):
        client.async_stream_infer("m", [x])
    client.stop_stream()
    assert [a.get_response().model_version for a in answers] == ["1"] * 20


def test_workers_share_the_split(start) -> None:
    params = {"canary_window_s": "4", "canary_min_requests": "30", "traffic_split": "1:50,2:50",
              "canary_p95_slack_ms": "5000"}  # fmt: skip
    models = {"m": model_files("m", {1: 0, 2: 0}), "c": model_files("c", {1: 0, 2: 10}, **params)}
    server = start(models, "--workers", "2")
    assert call(server, "POST", "/v2/models/m/traffic", {"weights": {"1": 1, "2": 0}})[0] == 200
    seen = set()
    for _ in range(40):  # a new connection each time: the kernel deals them to both workers
        status, body = pipelined(server, "m", [infer_body()], 1)[0]
        seen.add(versions_of([(status, body)])[0])
        assert call(server, "GET", "/v2/models/m/traffic")[1]["weights"] == {"1": 1, "2": 0}
    assert seen == {"1"}
    # a rollback one worker decides applies on every worker
    until(lambda: call(server, "GET", "/v2/models/c/traffic")[1]["weights"]["2"] == 0, "rolled back", server, "c")
    deadline, agreeing = time.monotonic() + 30, 0  # the deciding worker sends the split on without waiting
    while agreeing < 10:
        assert time.monotonic() < deadline, "the workers do not agree on the rollback"
        agreeing = agreeing + 1 if call(server, "GET", "/v2/models/c/traffic")[1]["weights"]["2"] == 0 else 0
    for _ in range(20):
        shown = call(server, "GET", "/v2/models/c/traffic")[1]
        assert shown["versions"]["2"]["state"] == "rolled back" and shown["versions"]["2"]["rollbacks"] >= 1
        assert set(versions_of(pipelined(server, "c", [infer_body()] * 20))) == {"1"}
    assert metric(server, "inferd_canary_rollbacks_total", model="c", version="2") >= 1


def test_openai_model_name_follows_the_split(start, tmp_path: Path) -> None:
    from tests.plugins.frontend_openai.chat_model import write_chat_model

    root = tmp_path / "chat_repo" / "chat"
    root.mkdir(parents=True)
    model_dir = write_chat_model(tmp_path / "chat_repo", "chat", tokenizer=root)  # the tokenizer: in the model's folder
    (model_dir / "2").mkdir()
    (model_dir / "2" / "model.py").write_text((model_dir / "1" / "model.py").read_text())
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { all: {} }\n" + parameters(traffic_split="1:1,2:0"))
    files = {str(p.relative_to(model_dir)): p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
    server = start({"chat": files}, "--openai-port", "0", "--openai-address", "127.0.0.1")
    body = json.dumps({"model": "chat", "prompt": "the quick brown fox", "max_tokens": 3}).encode()
    for _ in range(5):
        req = urllib.request.Request(f"http://127.0.0.1:{server.ports['openai']}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                assert resp.status == 200
        except urllib.error.HTTPError as exc:
            raise AssertionError(exc.read()) from None
    deadline = time.monotonic() + 30
    while True:  # a request is counted once its response is on its way: the last one may still be counting
        stats = {row["version"]: row["inference_count"]
                 for row in call(server, "GET", "/v2/models/chat/stats")[1]["model_stats"]}  # fmt: skip
        window = call(server, "GET", "/v2/models/chat/traffic")[1]["versions"]["1"]["window"]
        if (sum(stats.values()) >= 5 and window["requests"] >= 5) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert stats == {"1": 5, "2": 0}, stats  # without the split, the highest version (2) would answer
    # the frontend picked the version itself (for its tokenizer): the canary policy judged them all the same
    assert window["requests"] == 5 and window["failures"] == 0, window


DECOUPLED_CONFIG = """
name: "llm"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "V" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 4 } ]
version_policy: { all: {} }
"""
DECOUPLED_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        for r in requests:
            sender = r.get_response_sender()
            time.sleep({first_s})  # before the first response: the time to first token
            for _ in range(2):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("V", np.array([self.version], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_slow_first_token_canary_is_rolled_back_over_grpc_streams(start) -> None:
    params = parameters(traffic_split="1:50,2:50", canary_window_s="8", canary_min_requests="8",
                        canary_p95_slack_ms="100")  # fmt: skip
    files = {"config.pbtxt": DECOUPLED_CONFIG + params, "1/model.py": DECOUPLED_PY.format(first_s=0),
             "2/model.py": DECOUPLED_PY.format(first_s=0.4)}  # fmt: skip
    server = start({"llm": files})
    client = grpcclient.InferenceServerClient(server.grpc_url)
    x = grpcclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.array([1], np.int32))
    errors: list[Any] = []
    client.start_stream(callback=lambda result, error: errors.append(error) if error else None)
    deadline = time.monotonic() + 90
    try:
        while call(server, "GET", "/v2/models/llm/traffic")[1]["versions"]["2"]["state"] != "rolled back":
            assert time.monotonic() < deadline, call(server, "GET", "/v2/models/llm/traffic")
            for _ in range(8):
                client.async_stream_infer("llm", [x])
            time.sleep(0.2)
    finally:
        client.stop_stream()
    assert errors == []
    decision = call(server, "GET", "/v2/models/llm/traffic")[1]["decisions"][-1]
    assert decision["action"] == "rollback" and "p95" in decision["verdict"], decision
    assert decision["canary"]["p95_ms"] >= 300 and decision["canary"]["p95_ms"] > decision["stable"]["p95_ms"]
