"""Traffic weights an attacker picks: a weight past the documented maximum, one
of thousands of digits, a version written "01" — each a 400 in inferd's own words naming the model,
the version and the limit, over HTTP and gRPC; the split in force stays as it was and requests that
name no version keep being answered. Before: a weight of 401 digits was taken (200) and every
unversioned request then failed 500 with Python's OverflowError; a weight of 5,000 digits was
refused with Python's int-conversion message; "01" was taken as version 1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from inferd.frontends.grpc import traffic_pb2, traffic_pb2_grpc
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.http_calls import json_call
from tests.servers import Servers

LIMIT = "1000000"  # docs/traffic.md
#: What Python says where inferd did not speak for itself.
PYTHON_WORDS = ("OverflowError", "int too large", "Exceeds the limit", "set_int_max_str_digits", "Traceback")
INFER = json.dumps({
    "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]
}).encode()  # fmt: skip


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    config = models.ADD_SUB_CONFIG + "version_policy: { all: {} }\n"
    return serve({"m": models.add_sub(versions=(1, 2), config=config)})


def _http(server: ServerProcess, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    return json_call(f"http://{server.http_url}{path}", method, body)


def _set(server: ServerProcess, weights_json: str) -> tuple[int, Any]:
    return _http(server, "POST", "/v2/models/m/traffic", f'{{"weights":{weights_json}}}'.encode())


def _unversioned_answers(server: ServerProcess, count: int = 20) -> list[int]:
    """The status of ``count`` infer requests without an ``id`` (the split picks at random)."""
    return [_http(server, "POST", "/v2/models/m/infer", INFER)[0] for _ in range(count)]


def _refused(status: int, reply: Any, *words: str) -> None:
    assert status == 400, (status, reply)
    error = reply["error"]
    assert "model 'm'" in error and all(w in error for w in words), error
    assert not any(w in error for w in PYTHON_WORDS), error
    assert len(error) < 400, error  # a quote of the value, not the value


@pytest.fixture(autouse=True)
def known_split(server: ServerProcess) -> Iterator[None]:
    status, reply = _set(server, '{"1":3,"2":1}')
    assert status == 200, reply
    yield
    assert _http(server, "GET", "/v2/models/m/traffic")[1]["weights"] == {"1": 3, "2": 1}  # untouched
    assert _unversioned_answers(server) == [200] * 20


def test_a_weight_of_hundreds_of_digits_is_refused_and_unversioned_requests_keep_working(server):
    _refused(*_set(server, '{"1":1' + "0" * 400 + ',"2":1}'), "version 1", LIMIT)


def test_a_weight_past_the_maximum_is_refused(server):
    _refused(*_set(server, '{"1":1000001,"2":1}'), "version 1", LIMIT)
    _refused(*_set(server, '{"1":1,"2":"1000001"}'), "version 2", LIMIT)
    assert _set(server, '{"1":1000000,"2":1}')[0] == 200  # the maximum itself is a weight
    assert _unversioned_answers(server) == [200] * 20
    assert _set(server, '{"1":3,"2":1}')[0] == 200


def test_a_weight_of_thousands_of_digits_is_refused_in_inferds_words(server):
    _refused(*_set(server, '{"1":1,"2":' + "9" * 5000 + "}"), "version 2", LIMIT)
    _refused(*_set(server, '{"1":1,"2":-' + "9" * 5000 + "}"), "version 2", LIMIT)


@pytest.mark.parametrize("key", ["01", "+1", " 1", "1 ", "1.0", "1e0", "0x1", "\u0661", "0", "9" * 5000])
def test_a_version_not_written_as_a_version_directory_is_refused(server, key: str):
    _refused(*_set(server, json.dumps({key: 1, "2": 1})), "not a version number")


@pytest.mark.parametrize("transport", ["grpcio", "h2"])
def test_grpc_refuses_the_same(tmp_path: Path, transport: str):
    config = models.ADD_SUB_CONFIG + "version_policy: { all: {} }\n"
    repo = write_repository(tmp_path / "models", {"m": models.add_sub(versions=(1, 2), config=config)})
    with ServerProcess([repo], ["--grpc-transport", transport]) as srv, grpc.insecure_channel(srv.grpc_url) as ch:
        stub = traffic_pb2_grpc.TrafficStub(ch)
        stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="m", weights={"1": 3, "2": 1}))
        bad = [({"1": 10**18, "2": 1}, ("version 1", LIMIT)), ({"1": 1, "2": -(2**63)}, ("version 2", LIMIT)),
               ({"01": 1, "2": 1}, ("'01' is not a version number",)),
               ({"+2": 1}, ("'+2' is not a version number",))]  # fmt: skip
        for weights, words in bad:
            with pytest.raises(grpc.RpcError) as caught:
                stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="m", weights=weights))
            error = caught.value.details()
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error
            assert "model 'm'" in error and all(w in error for w in words), error
        assert dict(stub.ModelTraffic(traffic_pb2.ModelTrafficRequest(name="m")).weights) == {"1": 3, "2": 1}
        assert _unversioned_answers(srv) == [200] * 20
