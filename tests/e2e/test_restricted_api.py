"""Triton's restricted API groups over real sockets: ``--http-restricted-api`` and
``--grpc-restricted-protocol``, with tritonclient, raw HTTP and grpcio stubs.

The statuses and sentences are those Triton 2.51 answers with the same flags: HTTP 403 with
``{"error":"This API is restricted, expecting header '<key>'"}`` (as text/plain), gRPC
UNAVAILABLE "This protocol is restricted, expecting header 'triton-grpc-protocol-<key>'".
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.e2e.raw_http import raw_http
from tests.servers import Servers
from tests.triton_clients import add_sub_inputs

HTTP_FLAGS = ["--http-restricted-api=model-repository,logging:admin-key=secret1",
              "--http-restricted-api=inference:ikey=ival"]  # fmt: skip
GRPC_FLAGS = ["--grpc-restricted-protocol=model-repository,inference:admin-key=secret1",
              "--grpc-restricted-protocol=health:hk=hv"]  # fmt: skip
ADMIN = {"triton-grpc-protocol-admin-key": "secret1"}
HTTP_SENTENCE = "This API is restricted, expecting header '{}'"
GRPC_SENTENCE = "This protocol is restricted, expecting header 'triton-grpc-protocol-{}'"


@pytest.fixture(scope="module", params=["h2", "grpcio"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    repo = {"add_sub": models.add_sub()}
    args = [
        "--grpc-transport",
        request.param,
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        *HTTP_FLAGS,
        *GRPC_FLAGS,
    ]
    with serve(repo, *args) as proc:
        yield proc


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("POST", "/v2/repository/index", "admin-key"),
        ("POST", "/v2/repository/models/add_sub/load", "admin-key"),
        ("GET", "/v2/logging", "admin-key"),
        ("POST", "/v2/models/add_sub/infer", "ikey"),
        ("POST", "/v2/models/nonexistent/infer", "ikey"),  # the key is asked for before the model is looked up
        ("POST", "/v2/models/add_sub/generate", "ikey"),
    ],
)
def test_http_restricted_group_without_or_with_a_wrong_key_is_403(server, method, path, key):
    for headers in ({}, {key: "wrong"}, {f"triton-grpc-protocol-{key}": "secret1"}):
        status, reply_headers, body = raw_http(server, method, path, headers, b"{}")
        assert status == 403
        assert json.loads(body) == {"error": HTTP_SENTENCE.format(key)}
        assert reply_headers["content-type"] == "text/plain"  # as Triton sends it


def test_http_restricted_group_with_its_key_is_served(server):
    status, _, body = raw_http(server, "POST", "/v2/repository/index", {"Admin-Key": "secret1"})
    assert status == 200 and [m["name"] for m in json.loads(body)] == ["add_sub"]
    status, _, body = raw_http(server, "POST", "/v2/models/add_sub/infer", {"ikey": "ival"}, models.ADD_SUB_JSON)
    assert status == 200
    assert json.loads(body)["outputs"][0]["data"] == [2.0, 4.0, 6.0, 8.0]


def test_http_unrestricted_groups_stay_open(server):
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("add_sub")
    assert client.get_model_metadata("add_sub")["name"] == "add_sub"
    assert client.get_model_config("add_sub")["name"] == "add_sub"
    assert client.get_inference_statistics("add_sub")["model_stats"][0]["name"] == "add_sub"


def test_tritonclient_http_sends_the_key_as_a_header(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as exc:
        client.get_model_repository_index()
    assert HTTP_SENTENCE.format("admin-key") in exc.value.message()
    index = client.get_model_repository_index(headers={"admin-key": "secret1"})
    assert [m["name"] for m in index] == ["add_sub"]


@pytest.mark.parametrize(
    ("call", "key"),
    [
        (lambda c, h: c.is_server_live(headers=h), "hk"),
        (lambda c, h: c.is_model_ready("add_sub", headers=h), "hk"),
        (lambda c, h: c.get_model_repository_index(headers=h), "admin-key"),
        (lambda c, h: c.unload_model("add_sub", headers=h), "admin-key"),
        (lambda c, h: c.infer("add_sub", add_sub_inputs(), headers=h), "admin-key"),
    ],
)
def test_grpc_restricted_protocol_without_or_with_a_wrong_key_is_unavailable(server, call, key):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for headers in (None, {key: "secret1"}, {f"triton-grpc-protocol-{key}": "wrong"}):  # the plain key is not it
        with pytest.raises(InferenceServerException) as exc:
            call(client, headers)
        assert exc.value.status() == "StatusCode.UNAVAILABLE"
        assert exc.value.message() == GRPC_SENTENCE.format(key)


def test_grpc_restricted_protocol_with_its_key_is_served(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_live(headers={"triton-grpc-protocol-hk": "hv"})
    assert [m.name for m in client.get_model_repository_index(headers=ADMIN).models] == ["add_sub"]
    result = client.infer("add_sub", add_sub_inputs(), headers=ADMIN)
    assert result.as_numpy("OUTPUT0").tolist() == [[2.0, 2.0, 2.0, 2.0]]
    assert client.get_server_metadata().name == "inferd"  # metadata is not restricted


def test_grpc_health_check_and_streams_are_restricted(server):
    channel = grpc.insecure_channel(server.grpc_url)
    check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda _: b"",
                                response_deserializer=bytes)  # fmt: skip
    with pytest.raises(grpc.RpcError) as exc:
        check(None)
    assert (exc.value.code(), exc.value.details()) == (grpc.StatusCode.UNAVAILABLE, GRPC_SENTENCE.format("hk"))
    assert check(None, metadata=[("triton-grpc-protocol-hk", "hv")]) is not None
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as exc:  # Triton ends the stream with the status
        list(stub.ModelStreamInfer(iter([service_pb2.ModelInferRequest(model_name="add_sub")])))
    assert (exc.value.code(), exc.value.details()) == (grpc.StatusCode.UNAVAILABLE, GRPC_SENTENCE.format("admin-key"))
    channel.close()


def test_grpc_stream_with_its_key_is_served(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: list[object] = []
    client.start_stream(lambda result, error: results.append(error or result), headers=ADMIN)
    client.async_stream_infer("add_sub", add_sub_inputs())
    client.stop_stream()
    assert len(results) == 1
    assert results[0].as_numpy("OUTPUT1").tolist() == [[0.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--http-restricted-api=bogus:k=v", "unknown restricted api 'bogus'"),
        ("--grpc-restricted-protocol=health:k", "expected <api>[,<api>...]:<key>=<value>"),
        # Triton's gRPC flag says "protocol" (qa/L0_grpc/test.sh greps for it)
        ("--grpc-restricted-protocol=model-reposit,health:k1=v1", "unknown restricted protocol 'model-reposit'"),
    ],
)
def test_a_bad_restricted_flag_stops_the_start(tmp_path, flag, message):
    cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(tmp_path), flag,
           "--http-restricted-api=health:a=b", "--http-port=0"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr


def test_one_group_in_two_flags_is_refused(tmp_path):
    cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", str(tmp_path),
           "--http-restricted-api=health:a=b", "--http-restricted-api=health,logging:c=d"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "restricted api 'health' can not be specified in multiple config groups" in done.stderr
