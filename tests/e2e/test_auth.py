"""API keys and tenants (``--auth-config``) over real sockets: HTTP (tritonclient and raw) and
gRPC on both transports (tritonclient with ``headers=``, grpcio stubs), the bad-input pass, key
file reloads, per-tenant limits and their counters."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.raw_http import raw_http
from tests.python_models import python_model
from tests.servers import Servers
from tests.triton_clients import add_sub_inputs
from tests.waiting import wait_for

CONFIG = f"""
tenants:
  alice:
    keys: [{digest("alice-key")}]
    models: ["add_*"]
  ops:
    keys: [{digest("ops-key")}]
    models: ["add_*"]
    apis: [model-repository, statistics, trace]
  admin:
    keys: [{digest("admin-key")}]
    apis: [health, metadata, inference, model-config, model-repository, statistics, logging, trace]
  limited:
    keys: [{digest("limited-key")}]
    rate: 0.5
    burst: 1
  slow:
    keys: [{digest("slow-key")}]
    models: [sleep]
    concurrency: 1
"""
MODEL_SET = {"add_sub": models.add_sub(), "secret": models.add_sub(), "sleep": python_model("sleep")}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers
) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("auth")
    repo = write_repository(root / "models", MODEL_SET)
    (root / "auth.yaml").write_text(CONFIG)
    args = [
        "--grpc-transport",
        request.param,
        "--model-control-mode=explicit",
        "--load-model=*",
        f"--auth-config={root / 'auth.yaml'}",
    ]
    with serve(repo, *args) as proc:
        yield proc


def _healthy(server: ServerProcess) -> None:
    status, _, body = raw_http(server, "POST", "/v2/models/add_sub/infer", bearer("alice-key"), models.ADD_SUB_JSON)
    assert status == 200, body


# -- HTTP -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing API key: send it as 'Authorization: Bearer <key>'"),
        ({"X-Api-Key": "alice-key"}, "missing API key"),  # a key in the wrong header
        ({"api-key": "alice-key"}, "missing API key"),
        ({"Authorization": "alice-key"}, "the Authorization header must be 'Bearer <key>'"),
        ({"Authorization": "Bearer wrong-key"}, "unknown API key"),
        ({"Authorization": "Bearer " + "k" * 20_000}, "the Authorization header is 20007 bytes long, at most 4096"),
    ],
)
def test_http_without_a_valid_key_is_401(server, headers, message):
    status, reply_headers, body = raw_http(server, "POST", "/v2/models/add_sub/infer", headers, models.ADD_SUB_JSON)
    assert status == 401
    assert message in json.loads(body)["error"]
    assert reply_headers["www-authenticate"] == "Bearer"
    status, _, body = raw_http(server, "GET", "/v2/models/add_sub", headers)
    assert status == 401 and message in json.loads(body)["error"]
    _healthy(server)


def test_http_health_stays_open_for_probes(server):
    assert raw_http(server, "GET", "/v2/health/live")[0] == 200
    assert raw_http(server, "GET", "/v2/health/ready")[0] == 200


def test_http_tenant_calls_its_models_with_tritonclient(server):
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.full((1, 4), 3, np.float32))
    result = client.infer("add_sub", inputs, headers=bearer("alice-key"))
    assert result.as_numpy("OUTPUT0").tolist() == [[6.0] * 4]
    assert client.get_model_metadata("add_sub", headers=bearer("alice-key"))["name"] == "add_sub"
    with pytest.raises(InferenceServerException) as exc:
        client.infer("add_sub", inputs)
    assert "missing API key" in exc.value.message()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v2/models/{}/infer", models.ADD_SUB_JSON),
        ("GET", "/v2/models/{}", b""),
        ("GET", "/v2/models/{}/versions/1", b""),
        ("GET", "/v2/models/{}/config", b""),
        ("GET", "/v2/models/{}/ready", b""),
        ("GET", "/v2/models/{}/stats", b""),
        ("POST", "/v2/models/{}/generate", b'{"text_input": "a"}'),
    ],
)
def test_http_a_model_the_tenant_may_not_see_answers_as_an_unknown_one(server, method, path, body):
    seen = raw_http(server, method, path.format("secret"), bearer("alice-key"), body)
    unknown = raw_http(server, method, path.format("nonexistent"), bearer("alice-key"), body)
    assert seen[0] == unknown[0] and seen[0] in (400, 404)
    assert seen[2] == unknown[2].replace(b"nonexistent", b"secret")
    assert raw_http(server, method, path.format("secret"), bearer("admin-key"), body)[0] != seen[0]  # it exists


def test_http_trace_settings_of_an_unseen_model_answer_as_an_unknown_one(server):
    seen = raw_http(server, "GET", "/v2/models/secret/trace/setting", bearer("ops-key"))
    unknown = raw_http(server, "GET", "/v2/models/nonexistent/trace/setting", bearer("ops-key"))
    assert seen[0] == unknown[0] == 400
    assert seen[2] == unknown[2].replace(b"nonexistent", b"secret")
    assert raw_http(server, "GET", "/v2/models/add_sub/trace/setting", bearer("ops-key"))[0] == 200


@pytest.mark.parametrize(("method", "body"), [("GET", b""), ("POST", b'{"1": 100}')])
def test_http_traffic_of_an_unseen_model_answers_as_an_unknown_one(server, method, body):
    seen = raw_http(server, method, "/v2/models/secret/traffic", bearer("ops-key"), body)
    unknown = raw_http(server, method, "/v2/models/nonexistent/traffic", bearer("ops-key"), body)
    assert seen[0] == unknown[0] == 404
    assert seen[2] == unknown[2].replace(b"nonexistent", b"secret")
    assert b"secret" not in raw_http(server, method, "/v2/models/secre/traffic", bearer("ops-key"), body)[2]  # no hint
    assert raw_http(server, "GET", "/v2/models/secret/traffic", bearer("admin-key"))[0] == 200  # it exists


def test_http_index_and_statistics_are_filtered(server):
    status, _, body = raw_http(server, "POST", "/v2/repository/index", bearer("ops-key"))
    assert status == 200 and [m["name"] for m in json.loads(body)] == ["add_sub"]
    status, _, body = raw_http(server, "POST", "/v2/repository/index", bearer("admin-key"))
    assert [m["name"] for m in json.loads(body)] == ["add_sub", "secret", "sleep"]
    status, _, body = raw_http(server, "GET", "/v2/models/stats", bearer("alice-key"))
    assert status == 200 and [m["name"] for m in json.loads(body)["model_stats"]] == ["add_sub"]


def test_http_loading_an_unseen_model_answers_as_an_unknown_one(server):
    seen = raw_http(server, "POST", "/v2/repository/models/secret/load", bearer("ops-key"))
    unknown = raw_http(server, "POST", "/v2/repository/models/nonexistent/load", bearer("ops-key"))
    assert seen[0] == unknown[0] == 404
    assert seen[2] == unknown[2].replace(b"nonexistent", b"secret")
    assert raw_http(server, "POST", "/v2/repository/models/secret/unload", bearer("ops-key"))[0] == 200
    assert raw_http(server, "GET", "/v2/models/secret/ready", bearer("admin-key"))[0] == 200  # still loaded


def test_http_an_api_group_outside_the_tenant_rights_is_403(server):
    status, _, body = raw_http(server, "POST", "/v2/repository/index", bearer("alice-key"))
    assert status == 403 and json.loads(body) == {"error": "tenant 'alice' may not use the model-repository API"}
    status, _, body = raw_http(server, "GET", "/v2/logging", bearer("ops-key"))
    assert status == 403 and json.loads(body) == {"error": "tenant 'ops' may not use the logging API"}
    assert raw_http(server, "GET", "/v2/logging", bearer("admin-key"))[0] == 200


def test_http_rate_limit_answers_429_with_retry_after(server):
    first = raw_http(server, "GET", "/v2/models/add_sub", bearer("limited-key"))
    second = raw_http(server, "GET", "/v2/models/add_sub", bearer("limited-key"))
    assert first[0] == 200 or first[0] == 429  # the other transport's server is its own
    assert second[0] == 429
    assert int(second[1]["retry-after"]) >= 1
    assert "tenant 'limited' is over its rate limit of 0.5 requests/s (burst 1)" in json.loads(second[2])["error"]
    _healthy(server)


def test_concurrent_requests_over_the_limit_get_429(server):
    body = json.dumps({"inputs": [{"name": "SECONDS", "shape": [1], "datatype": "FP32", "data": [1.0]}]}).encode()
    replies: list[tuple[int, dict[str, str], bytes]] = []
    calls = [threading.Thread(target=lambda: replies.append(
        raw_http(server, "POST", "/v2/models/sleep/infer", bearer("slow-key"), body))) for _ in range(2)]  # fmt: skip
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    replies.sort(key=lambda r: r[0])
    assert [r[0] for r in replies] == [200, 429]  # the model has 2 instances: only the tenant's limit refuses
    assert replies[1][1]["retry-after"] == "1"
    assert "tenant 'slow' already has 1 requests in flight (its limit is 1)" in json.loads(replies[1][2])["error"]
    assert raw_http(server, "POST", "/v2/models/sleep/infer", bearer("slow-key"), body)[0] == 200  # the slot is back


def test_tenant_counters_on_metrics(server):
    raw_http(server, "GET", "/v2/models/add_sub", bearer("alice-key"))
    raw_http(server, "GET", "/v2/models/add_sub", bearer("nope"))
    conn = http.client.HTTPConnection(f"127.0.0.1:{server.metrics_port}", timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}
    assert lines['inferd_tenant_requests_total{outcome="admitted",tenant="alice"}'] >= 1
    assert lines['inferd_tenant_requests_total{outcome="unauthenticated",tenant="(none)"}'] >= 1
    assert lines['inferd_tenant_requests_total{outcome="forbidden",tenant="alice"}'] >= 1
    assert 'inferd_tenant_requests_in_flight{tenant="alice"}' in lines


# -- gRPC -------------------------------------------------------------------------------------------


def _grpc_error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as exc:
        call()
    return exc.value


def test_grpc_without_a_valid_key_is_unauthenticated(server):
    # The long key stays under grpc's 8 KiB soft metadata limit: between the soft and the hard
    # limit grpcio refuses a call at random (RESOURCE_EXHAUSTED), before inferd sees it.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for headers, message in ((None, "missing API key"), ({"authorization": "Bearer wrong"}, "unknown API key"),
                             ({"x-api-key": "alice-key"}, "missing API key"),
                             ({"authorization": "Bearer " + "k" * 5000}, "at most 4096")):  # fmt: skip
        error = _grpc_error(lambda h=headers: client.infer("add_sub", add_sub_inputs(), headers=h))
        assert error.status() == "StatusCode.UNAUTHENTICATED" and message in error.message(), error
    assert client.is_server_live() and client.is_server_ready()  # health stays open
    result = client.infer("add_sub", add_sub_inputs(), headers={"authorization": "Bearer alice-key"})
    assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 4]


def test_grpc_unseen_models_answer_as_unknown_ones(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    alice = {"authorization": "Bearer alice-key"}
    for call in (lambda m: client.infer(m, add_sub_inputs(), headers=alice),
                 lambda m: client.get_model_metadata(m, headers=alice),
                 lambda m: client.get_model_config(m, headers=alice),
                 lambda m: client.get_inference_statistics(m, headers=alice)):  # fmt: skip
        seen = _grpc_error(lambda c=call: c("secret"))
        unknown = _grpc_error(lambda c=call: c("nonexistent"))
        assert seen.status() == unknown.status()
        assert seen.message() == unknown.message().replace("nonexistent", "secret")
    assert client.is_model_ready("secret", headers=alice) is False
    assert client.is_model_ready("secret", headers={"authorization": "Bearer admin-key"}) is True
    stats = client.get_inference_statistics(headers=alice)
    assert [m.name for m in stats.model_stats] == ["add_sub"]
    ops = {"authorization": "Bearer ops-key"}
    assert [m.name for m in client.get_model_repository_index(headers=ops).models] == ["add_sub"]
    seen = _grpc_error(lambda: client.get_trace_settings(model_name="secret", headers=ops))
    unknown = _grpc_error(lambda: client.get_trace_settings(model_name="nonexistent", headers=ops))
    assert (seen.status(), seen.message()) == (unknown.status(), unknown.message().replace("nonexistent", "secret"))
    seen = _grpc_error(lambda: client.load_model("secret", headers=ops))
    unknown = _grpc_error(lambda: client.load_model("nonexistent", headers=ops))
    assert (seen.status(), seen.message()) == (unknown.status(), unknown.message().replace("nonexistent", "secret"))


def test_grpc_traffic_of_an_unseen_model_answers_as_an_unknown_one(server):
    import grpc

    from inferd.frontends.grpc import traffic_pb2, traffic_pb2_grpc

    ops = (("authorization", "Bearer ops-key"),)
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = traffic_pb2_grpc.TrafficStub(channel)
        errors = []
        for name in ("secret", "nonexistent"):
            with pytest.raises(grpc.RpcError) as exc:
                stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name=name), metadata=ops)
            errors.append((exc.value.code(), exc.value.details()))
        assert errors[0] == (errors[1][0], errors[1][1].replace("nonexistent", "secret"))
        assert errors[0][0] == grpc.StatusCode.NOT_FOUND
        admin = (("authorization", "Bearer admin-key"),)
        assert (
            json.loads(stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="secret"), metadata=admin).json)["model"]
            == "secret"
        )


def test_grpc_forbidden_group_and_rate_limit(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    error = _grpc_error(lambda: client.get_model_repository_index(headers={"authorization": "Bearer alice-key"}))
    assert error.status() == "StatusCode.PERMISSION_DENIED"
    assert error.message() == "tenant 'alice' may not use the model-repository API"
    limited = {"authorization": "Bearer limited-key"}
    statuses, messages = [], []
    for _ in range(2):
        try:
            client.get_model_metadata("add_sub", headers=limited)
            statuses.append("OK")
        except InferenceServerException as exc:
            statuses.append(exc.status())
            messages.append(exc.message())
    assert statuses[-1] == "StatusCode.RESOURCE_EXHAUSTED"
    assert all("over its rate limit" in message for message in messages), messages


def test_grpc_stream_needs_a_key_and_checks_each_model(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: list[object] = []
    client.start_stream(lambda result, error: results.append(error or result))
    with contextlib.suppress(InferenceServerException):  # the stream may have ended already (it does at once)
        client.async_stream_infer("add_sub", add_sub_inputs())
    client.stop_stream()
    assert len(results) == 1 and results[0].status() == "StatusCode.UNAUTHENTICATED"
    assert "missing API key" in results[0].message()
    results.clear()
    client.start_stream(
        lambda result, error: results.append(error or result), headers={"authorization": "Bearer alice-key"}
    )
    client.async_stream_infer("add_sub", add_sub_inputs())
    client.async_stream_infer("secret", add_sub_inputs())
    client.async_stream_infer("nonexistent", add_sub_inputs())
    client.stop_stream()
    # the requests of a stream run concurrently: answers come in any order
    answers = [r for r in results if not isinstance(r, InferenceServerException)]
    errors = sorted(r.message() for r in results if isinstance(r, InferenceServerException))
    assert len(answers) == 1 and answers[0].as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
    assert errors == ["Request for unknown model: 'nonexistent' is not found",
                      "Request for unknown model: 'secret' is not found"]  # fmt: skip


# -- the key file -----------------------------------------------------------------------------------


def _touch(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_key_file_changes_apply_without_restart_and_a_bad_file_keeps_the_old_keys(tmp_path):
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"tenants": {"a": {"keys": [digest("one")]}}}))
    proc = ServerProcess([repo], [f"--auth-config={keys}"]).start()
    try:

        def status(key: str) -> int:
            return raw_http(proc, "GET", "/v2/models/add_sub", bearer(key))[0]

        assert (status("one"), status("two")) == (200, 401)
        _touch(keys, json.dumps({"tenants": {"a": {"keys": [digest("two")]}}}))
        wait_for(lambda: status("two") == 200, "the new key to apply", log=proc.log)
        assert status("one") == 401
        _touch(keys, '{"tenants": {"a": {"keys": [')
        # the file is looked at (at most once a second) as requests come
        wait_for(
            lambda: status("two") == 200 and "the previous keys stay in force" in proc.log(), "the bad file refused"
        )
        assert f"{keys}:1: not valid JSON" in proc.log()
        assert status("two") == 200
    finally:
        proc.stop()


def test_a_malformed_key_file_stops_the_start_naming_file_and_line(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"tenants:\n  a:\n    keys: [{digest('k')}]\n  b:\n    keys: [nothex]\n")
    cmd = [
        sys.executable,
        "-m",
        "inferd.host.cli",
        "serve",
        "--model-repository",
        str(tmp_path),
        f"--auth-config={keys}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{keys}:4: tenant 'b': key 'nothex...' is not a sha256 hex digest" in done.stderr
