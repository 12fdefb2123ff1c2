"""The HTTP frontend end to end: a real `inferd serve` called with tritonclient.http."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve(
        {
            "add_sub": models.add_sub(offset=0),
            "picky": models.simple(models.PICKY_CONFIG, models.PICKY_PY),
            "echo": models.simple(models.ECHO_CONFIG, models.ECHO_PY),
            "slow": models.simple(models.SLOW_CONFIG, models.SLOW_PY),
        }
    )


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    yield c
    c.close()


def add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool = True) -> list[httpclient.InferInput]:
    inputs = [
        httpclient.InferInput("INPUT0", list(a.shape), "FP32"),
        httpclient.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def raw_post(server, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    import http.client

    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    conn.request("POST", path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, (json.loads(data) if data else {})


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "inferd"
    assert {"model_repository", "binary_tensor_data", "statistics"} <= set(meta["extensions"])


def test_model_metadata_and_config(client):
    meta = client.get_model_metadata("add_sub")
    assert meta["versions"] == ["1"]
    assert meta["platform"] == "python"
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 4]},
    ]
    config = client.get_model_config("add_sub")
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert [i["dims"] for i in config["input"]] == [[4], [4]]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert client.is_model_ready("add_sub")
    assert not client.is_model_ready("add_sub", "2")


@pytest.mark.parametrize("binary", [True, False])
def test_infer_values_binary_and_json(client, binary):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4), dtype=np.float32)
    b = rng.standard_normal((3, 4), dtype=np.float32)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = client.infer("add_sub", add_sub_inputs(a, b, binary), outputs=outputs, request_id="req-7")
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["model_version"] == "1"


def test_requested_output_subset(client):
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    result = client.infer("add_sub", add_sub_inputs(a, a), outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4), np.float32))


def test_bytes_tensors_and_parameters(client):
    text = np.array([b"hello", "w\u00f6rld".encode(), b""], dtype=np.object_)
    inp = httpclient.InferInput("TEXT", [3], "BYTES")
    inp.set_data_from_numpy(text)
    result = client.infer("echo", [inp], request_id="abc", parameters={"temperature": 0.5, "tag": "x"})
    np.testing.assert_array_equal(result.as_numpy("TEXT_OUT"), np.array([t[::-1] for t in text], dtype=np.object_))
    request_id, params = result.as_numpy("META")
    assert request_id == b"abc"
    assert json.loads(params) == {"temperature": 0.5, "tag": "x"}


def test_concurrent_requests_each_get_their_own_answer(client):
    pending = []
    for i in range(64):
        a = np.full((1, 4), i, np.float32)
        b = np.full((1, 4), 2 * i, np.float32)
        pending.append((a, b, client.async_infer("add_sub", add_sub_inputs(a, b))))
    for a, b, job in pending:
        result = job.get_result()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_execute_error_fails_only_that_request(client):
    def call(values):
        inp = httpclient.InferInput("X", [len(values)], "INT64")
        inp.set_data_from_numpy(np.array(values, np.int64))
        return client.infer("picky", [inp])

    with pytest.raises(InferenceServerException) as err:
        call([1, -5])
    assert "picky" in str(err.value) and "negative input -5" in str(err.value)
    np.testing.assert_array_equal(call([3, 4]).as_numpy("Y"), [6, 8])


BAD_REQUESTS = [
    # (case, path, body, headers, status, words the message must contain)
    ("unknown model", "/v2/models/nope/infer", {"inputs": []}, None, 404, ["nope"]),
    ("unknown version", "/v2/models/add_sub/versions/7/infer", {"inputs": []}, None, 404, ["add_sub", "7"]),
    ("malformed JSON", "/v2/models/add_sub/infer", b'{"inputs": [', None, 400, ["JSON"]),
    (
        "wrong datatype", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP64", "shape": [1, 4], "data": [1, 2, 3, 4]},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT0", "FP64", "FP32", "add_sub"],
    ),
    (
        "wrong shape", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 5], "data": [1, 2, 3, 4, 5]},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT0", "[-1,4]", "[1,5]"],
    ),
    (
        "missing input", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT1", "missing"],
    ),
    (
        "data shorter than shape", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3]},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT0", "4", "3"],
    ),
    (
        "huge declared shape", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [100000000000, 4], "data": [1, 2, 3, 4]},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT0", "100000000000"],
    ),
    (
        "binary header length past the body", "/v2/models/add_sub/infer", {"inputs": []},
        {"Inference-Header-Content-Length": "5000"}, 400, ["5000"],
    ),
    (
        "binary_data_size past the body", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}},
                    {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]},
        "binary-header", 400, ["INPUT", "binary"],
    ),
    (
        "unknown datatype", "/v2/models/add_sub/infer",
        {"inputs": [{"name": "INPUT0", "datatype": "FP33", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
        None, 400, ["INPUT0", "FP33"],
    ),
    (
        "too many rows", "/v2/models/add_sub/infer",
        {"inputs": [{"name": n, "datatype": "FP32", "shape": [9, 4], "data": [0.0] * 36} for n in ("INPUT0", "INPUT1")]},
        None, 400, ["batch-size", "8"],
    ),
    (
        "unknown output", "/v2/models/add_sub/infer",
        {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [0.0] * 4} for n in ("INPUT0", "INPUT1")],
         "outputs": [{"name": "OUTPUT9"}]},
        None, 400, ["OUTPUT9"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "path", "body", "headers", "status", "words"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS]
)
def test_bad_requests_get_triton_status_and_clear_message(server, client, case, path, body, headers, status, words):
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    if headers == "binary-header":  # a valid JSON header followed by 16 of the 32 promised bytes
        headers = {"Inference-Header-Content-Length": str(len(raw))}
        raw += b"\0" * 16
    code, payload = raw_post(server, path, raw, headers)
    assert code == status, payload
    message = payload["error"]
    for word in words:
        assert word in message, message
    assert client.is_server_ready()
    a = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(client.infer("add_sub", add_sub_inputs(a, a)).as_numpy("OUTPUT0"), a + a)


def test_unknown_route_and_method(server):
    code, payload = raw_post(server, "/v2/nothing/here", b"")
    assert code == 404
    import http.client

    conn = http.client.HTTPConnection(server.http_url, timeout=10)
    conn.request("DELETE", "/v2/models/add_sub/infer")
    assert conn.getresponse().status == 405


ADD_SUB_JSON = {
    "inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]} for n in ("INPUT0", "INPUT1")]
}


@pytest.mark.parametrize(
    ("path", "doc"),
    [
        ("/v2/models/add_sub/infer", ADD_SUB_JSON),
        ("/v2/models/add_sub/generate", {"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 2, 3, 4]}),
        ("/v2/repository/index", {}),
        ("/v2/trace/setting", {}),
        ("/v2/logging", {}),
    ],
)
def test_every_route_reads_compressed_bodies_and_refuses_corrupt_ones_alike(server, path, doc):
    import gzip
    import zlib

    body = json.dumps(doc).encode()
    assert raw_post(server, path, body)[0] == 200
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        assert raw_post(server, path, packed, {"Content-Encoding": encoding}) == raw_post(server, path, body), encoding
    try:
        zlib.decompress(b"not gzip", 16 + zlib.MAX_WBITS)
    except zlib.error as exc:
        expected = f"failed to decompress the request body: {exc}"
    assert raw_post(server, path, b"not gzip", {"Content-Encoding": "gzip"}) == (400, {"error": expected})


def test_statistics_count_requests(client):
    before = client.get_inference_statistics("picky")["model_stats"][0]
    inp = httpclient.InferInput("X", [2], "INT64")
    inp.set_data_from_numpy(np.array([1, 2], np.int64))
    for _ in range(5):
        client.infer("picky", [inp])
    bad = httpclient.InferInput("X", [1], "INT64")
    bad.set_data_from_numpy(np.array([-1], np.int64))
    with pytest.raises(InferenceServerException):
        client.infer("picky", [bad])
    after = client.get_inference_statistics("picky")["model_stats"][0]
    s0, s1 = before["inference_stats"], after["inference_stats"]
    assert s1["success"]["count"] - s0["success"]["count"] == 5
    assert s1["fail"]["count"] - s0["fail"]["count"] == 1
    # As in Triton: the failed execution counts as an execution, its rows not as inferences.
    assert after["execution_count"] - before["execution_count"] == 6
    assert after["inference_count"] - before["inference_count"] == 5
    assert s1["compute_infer"]["ns"] > s0["compute_infer"]["ns"]
    assert after["last_inference"] > 0
    all_stats = client.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in all_stats} == {"add_sub", "picky", "echo", "slow"}


def test_repository_index_in_none_mode_and_control_refused(client):
    index = client.get_model_repository_index()
    assert {(m["name"], m["version"], m["state"]) for m in index} == {
        ("add_sub", "1", "READY"), ("picky", "1", "READY"), ("echo", "1", "READY"), ("slow", "1", "READY"),
    }  # fmt: skip
    with pytest.raises(InferenceServerException) as err:
        client.load_model("add_sub")
    assert "not allowed" in str(err.value)


def test_server_survives_garbage_on_the_socket(server, client):
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as s:
        s.sendall(b"\x00\x01GARBAGE\r\n\r\n")
        s.recv(100)
    assert client.is_server_live()
