"""Shadow traffic and the shadow -> canary -> promote policy, against a real ``inferd serve``
(docs/traffic.md, "Shadow traffic"): a shadow never changes what a client receives, one that
disagrees is held at the shadow stage with its disagreement reported, one that agrees is promoted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.e2e.release_models import infer_body, model, pipelined, versions_of
from tests.e2e.traffic_models import call
from tests.metrics_text import metric


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


def traffic(server: ServerProcess, name: str = "m") -> dict[str, Any]:
    code, shown = call(server, "GET", f"/v2/models/{name}/traffic")
    assert code == 200, shown
    return shown


def settle(server: ServerProcess, compared: int, name: str = "m", timeout: float = 60) -> dict[str, Any]:
    """The traffic document once the shadow has compared (or dropped) ``compared`` copies."""
    deadline = time.monotonic() + timeout
    while True:
        shown = traffic(server, name)
        shadow = shown["shadow"] or {}
        if shown["shadow"] is None or shadow["compared"] + shadow["dropped"] >= compared:
            return shown
        assert time.monotonic() < deadline, shown
        time.sleep(0.05)


def p99(samples: list[float]) -> float:
    return float(np.percentile(samples, 99))


def test_a_100_percent_shadow_never_changes_what_clients_receive(start) -> None:
    import grpc

    from inferd.frontends.grpc import traffic_pb2, traffic_pb2_grpc

    # version 2 answers differently everywhere (Y shifted by 1000): no client may ever see it; and it
    # takes 50 ms a request, so a shadow that delayed the answers would add 50 ms to every one
    params = {"traffic_split": "1:100", "shadow_min_requests": "20"}
    server = start({"m": model("m", {1: {}, 2: {"shift": 1000, "sleep": 0.05}}, **params)})
    http = httpclient.InferenceServerClient(server.http_url)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)

    def run(n: int, offset: int) -> tuple[list[float], list[float]]:
        times: dict[str, list[float]] = {"http": [], "grpc": []}
        for i in range(n):
            for proto, module, client in (("http", httpclient, http), ("grpc", grpcclient, grpc_client)):
                x = module.InferInput("X", [1], "INT32")
                x.set_data_from_numpy(np.array([offset + i], np.int32))
                begin = time.perf_counter()
                result = client.infer("m", [x], request_id=f"{proto}-{offset + i}")
                times[proto].append(time.perf_counter() - begin)
                version = (
                    result.get_response()["model_version"] if proto == "http" else result.get_response().model_version
                )
                assert version == "1", (proto, version)
                assert result.as_numpy("Y").tolist() == [(offset + i) * 2]
        return times["http"], times["grpc"]

    run(20, 0)  # warm up
    before_http, before_grpc = run(150, 1000)
    with grpc.insecure_channel(server.grpc_url) as channel:  # the shadow set over gRPC, live
        reply = traffic_pb2_grpc.TrafficStub(channel).ModelTraffic(
            traffic_pb2.ModelTrafficRequest(name="m", shadow="2:100")
        )
    assert json.loads(reply.json)["shadow"]["version"] == 2 and dict(reply.states) == {"1": "stable", "2": "shadow"}
    after_http, after_grpc = run(150, 2000)
    shown = settle(server, 300)
    shadow = shown["shadow"]
    assert shown["weights"] == {"1": 100, "2": 0}
    assert shadow["compared"] + shadow["dropped"] == 300 and shadow["agreed"] == 0
    assert shadow["disagreed"] == shadow["compared"] >= 20
    # the clients outran the 50 ms shadow: copies beyond the 64 in flight were dropped, not waited for
    assert shadow["dropped"] > 0
    # the stated bound (docs/traffic.md): with the shadow, the client's p99 stays within 25 ms of its
    # p99 without (a shadow on the request path would add its 50 ms to every answer)
    for before, after in ((before_http, after_http), (before_grpc, after_grpc)):
        assert p99(after) <= p99(before) + 0.025, (p99(before), p99(after))
    # at 20 copies the shadow was judged: held, and clients still get version 1
    assert shadow["state"] == "held at shadow" and "Y" in shadow["worst"][0]["why"]
    assert set(versions_of(pipelined(server, "m", [infer_body(i) for i in range(100)], depth=64))) == {"1"}
    shadow = settle(server, 400)["shadow"]  # the 100 more were copied too
    assert (
        metric(server, "inferd_shadow_requests_total", model="m", version="2", outcome="disagreed")
        == shadow["disagreed"]
    )


def test_a_shadow_disagreeing_on_1_percent_is_held_with_the_disagreement_reported(start) -> None:
    params = {"traffic_shadow": "2:100", "shadow_min_requests": "200", "shadow_queue": "1000"}
    server = start({"m": model("m", {1: {}, 2: {"diverge": 100, "noise": 1e-7}}, **params)})
    shown = traffic(server)
    assert shown["weights"] == {"1": 100, "2": 0} and shown["versions"]["2"]["state"] == "shadow"
    replies = pipelined(server, "m", [infer_body(x, f"req-{x}") for x in range(1, 201)], depth=8)
    assert set(versions_of(replies)) == {"1"}
    shown = settle(server, 200)
    shadow = shown["shadow"]
    # X = 100 and X = 200 disagree (Y off by one); the float noise (1e-7) is within the tolerance
    assert (shadow["compared"], shadow["agreed"], shadow["disagreed"], shadow["dropped"]) == (200, 198, 2, 0)
    assert shadow["state"] == "held at shadow" and shown["versions"]["2"]["state"] == "held at shadow"
    assert sorted(w["request_id"] for w in shadow["worst"]) == ["req-100", "req-200"]
    assert all(w["max_abs_diff"] == 1.0 for w in shadow["worst"])
    hold = [d for d in shown["decisions"] if d["action"] == "hold"]
    assert len(hold) == 1 and "disagreement 1.00% (2 disagreed, 0 failed of 200) > 0.00%" in hold[0]["verdict"]
    assert shown["weights"] == {"1": 100, "2": 0}  # never left the shadow stage
    index = {r["version"]: r for r in call(server, "POST", "/v2/repository/index", {})[1]}
    assert "shadow held: disagreement 1.00%" in index["2"]["reason"]
    assert metric(server, "inferd_shadow_requests_total", model="m", version="2", outcome="agreed") == 198
    assert metric(server, "inferd_shadow_max_abs_diff_bucket", model="m", version="2", le="1.0") == 200
    assert metric(server, "inferd_shadow_max_abs_diff_bucket", model="m", version="2", le="1e-06") == 198


def test_a_matching_shadow_is_promoted_through_the_canary_stages_with_no_failed_request(start) -> None:
    params = {"traffic_shadow": "2", "shadow_min_requests": "50", "shadow_queue": "1000", "canary_window_s": "2",
              "canary_min_requests": "10", "canary_promote_steps": "1,5,25,100", "canary_p95_slack_ms": "5000"}  # fmt: skip
    server = start({"m": model("m", {1: {}, 2: {"noise": 1e-7}}, **params)})
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    replies: list[tuple[int, bytes]] = []
    grpc_versions: list[str] = []
    deadline = time.monotonic() + 150
    while traffic(server)["versions"]["2"]["state"] != "promoted":
        assert time.monotonic() < deadline, traffic(server)
        replies.extend(pipelined(server, "m", [infer_body(i) for i in range(100)], depth=16))
        x = grpcclient.InferInput("X", [1], "INT32")
        x.set_data_from_numpy(np.array([7], np.int32))
        grpc_versions.append(grpc_client.infer("m", [x]).get_response().model_version)
    assert all(status == 200 for status, _ in replies), "a request failed"
    shown = traffic(server)
    actions = [(d["action"], d["weights"]) for d in shown["decisions"]]
    assert actions[0] == ("advance", {"1": 99, "2": 1}), actions
    assert [w for a, w in actions[1:] if a == "promote"] == [{"1": 95, "2": 5}, {"1": 75, "2": 25}, {"1": 0, "2": 100}]
    assert shown["decisions"][0]["shadow"]["compared"] >= 50 and shown["decisions"][0]["verdict"] == "agrees"
    assert shown["shadow"] is None and set(grpc_versions) <= {"1", "2"}
    assert set(versions_of(pipelined(server, "m", [infer_body(i) for i in range(50)], depth=64))) == {"2"}


def test_bad_shadow_requests_are_refused(start) -> None:
    server = start({"m": model("m", {1: {}, 2: {}}, traffic_split="1:100")})
    for body, code, text in (
        ({"shadow": "7"}, 404, "version 7 is not found"),
        ({"shadow": "2:150"}, 400, "percent must be a number from 0 to 100"),
        ({"shadow": "x"}, 400, "must be VERSION or VERSION:PERCENT"),
        ({"shadow": 2}, 400, '"shadow" must be a string'),
        ({"weights": {"1": 50, "2": 50}, "shadow": "2"}, 400, "cannot be the shadow"),
    ):
        status, answer = call(server, "POST", "/v2/models/m/traffic", body)
        assert status == code and text in answer["error"], (body, status, answer)
    status, answer = call(server, "POST", "/v2/models/m/traffic", {"shadow": "2:10"})
    assert status == 200 and answer["shadow"]["percent"] == 10 and answer["weights"] == {"1": 100, "2": 0}
    status, answer = call(server, "POST", "/v2/models/m/traffic", {"shadow": ""})
    assert status == 200 and answer["shadow"] is None and answer["versions"]["2"]["state"] == "off"
