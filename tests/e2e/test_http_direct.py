"""The infer routes' direct HTTP/1.1 path against a real ``inferd serve``: each request is sent
once with a ``Content-Length`` (answered directly, without ASGI) and once chunked (answered by the
ASGI app), and the two answers must be the same bytes: status line, headers, body. The values are
checked against numpy too, and tritonclient is served by the direct path."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.e2e.models import PICKY_CONFIG, PICKY_PY, add_sub, simple
from tests.servers import Servers

A = np.array([[1.5, 2.0, -3.0, 4.25]], np.float32)
B = np.array([[0.5, 1.0, 1.0, -0.25]], np.float32)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": add_sub(), "picky": simple(PICKY_CONFIG, PICKY_PY)})


def _binary_body(*arrays: np.ndarray, outputs: bool = True) -> tuple[bytes, int]:
    inputs = [{"name": f"INPUT{i}", "shape": list(a.shape), "datatype": "FP32",
               "parameters": {"binary_data_size": a.nbytes}} for i, a in enumerate(arrays)]  # fmt: skip
    header: dict[str, object] = {"inputs": inputs}
    if outputs:
        header["outputs"] = [{"name": n, "parameters": {"binary_data": True}} for n in ("OUTPUT0", "OUTPUT1")]
    head = json.dumps(header).encode()
    return head + b"".join(a.tobytes() for a in arrays), len(head)


def _json_body() -> bytes:
    inputs = [{"name": f"INPUT{i}", "shape": [1, 4], "datatype": "FP32", "data": a.ravel().tolist()}
              for i, a in enumerate((A, B))]  # fmt: skip
    return json.dumps({"inputs": inputs}).encode()


def _request(path: str, body: bytes, headers: dict[str, str], chunked: bool) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", *(f"{k}: {v}" for k, v in headers.items())]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        half = len(body) // 2
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p) + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + payload


def _exchange(port: int, raw: bytes) -> tuple[bytes, bytes]:
    """One request on a fresh connection: the response's head and body (by its Content-Length)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += sock.recv(65536)
        return head, body


def _both_ways(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[bytes, bytes]:
    """The answer, asserted to be the same bytes by the direct path and over ASGI."""
    direct = _exchange(port, _request(path, body, headers or {}, chunked=False))
    over_asgi = _exchange(port, _request(path, body, headers or {}, chunked=True))
    assert direct == over_asgi
    return direct


def _status(head: bytes) -> int:
    return int(head.split(b" ")[1])


def _outputs(head: bytes, body: bytes) -> dict[str, np.ndarray]:
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"inference-header-content-length"))  # fmt: skip
    header = json.loads(body[:length])
    arrays, offset = {}, length
    for out in header["outputs"]:
        size = out["parameters"]["binary_data_size"]
        arrays[out["name"]] = np.frombuffer(body[offset : offset + size], np.float32).reshape(out["shape"])
        offset += size
    return arrays


def test_binary_infer_is_the_same_both_ways_and_right(server: ServerProcess) -> None:
    body, length = _binary_body(A, B)
    head, answer = _both_ways(
        server.http_port, "/v2/models/add_sub/infer", body, {"Inference-Header-Content-Length": str(length)}
    )
    assert _status(head) == 200
    outputs = _outputs(head, answer)
    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
    np.testing.assert_array_equal(outputs["OUTPUT1"], A - B)


def test_json_and_versioned_infer_are_the_same_both_ways(server: ServerProcess) -> None:
    for path in ("/v2/models/add_sub/infer", "/v2/models/add_sub/versions/1/infer"):
        head, answer = _both_ways(server.http_port, path, _json_body(), {"Content-Type": "application/json"})
        assert _status(head) == 200
        got = {o["name"]: o["data"] for o in json.loads(answer)["outputs"]}
        assert got == {"OUTPUT0": (A + B).ravel().tolist(), "OUTPUT1": (A - B).ravel().tolist()}


def test_compressed_request_and_response_are_the_same_both_ways(server: ServerProcess) -> None:
    head, answer = _both_ways(
        server.http_port, "/v2/models/add_sub/infer", gzip.compress(_json_body()), {"Content-Encoding": "gzip"}
    )
    assert _status(head) == 200 and json.loads(answer)["model_name"] == "add_sub"
    head, answer = _both_ways(server.http_port, "/v2/models/add_sub/infer", _json_body(), {"Accept-Encoding": "gzip"})
    assert b"content-encoding: gzip" in head
    assert json.loads(gzip.decompress(answer))["outputs"][0]["data"] == (A + B).ravel().tolist()


def test_raw_binary_body_is_the_same_both_ways(server: ServerProcess) -> None:
    x = np.array([3, 4, 5], np.int64)
    head, answer = _both_ways(
        server.http_port, "/v2/models/picky/infer", x.tobytes(), {"Inference-Header-Content-Length": "0"}
    )
    assert _status(head) == 200


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "says"),
    [
        ("/v2/models/nope/infer", b'{"inputs": []}', {}, 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/models/add_sub/infer", b'{"inputs": [', {}, 400, "failed to parse the request JSON buffer"),
        (
            "/v2/models/add_sub/infer",
            b'{"inputs": []}',
            {"Inference-Header-Content-Length": "999"},
            400,
            "inference header size should be in range",
        ),
        ("/v2/models/add_sub/infer", b"x", {"Content-Encoding": "br"}, 501, "Unsupported compression type"),
        ("/v2/models/add_sub/infer", b"\x1f\x8b junk", {"Content-Encoding": "gzip"}, 400, "failed to decompress"),
        (
            "/v2/models/picky/infer",
            np.array([-1], np.int64).tobytes(),
            {"Inference-Header-Content-Length": "0"},
            500,
            "negative input",
        ),
    ],
)
def test_errors_are_the_same_both_ways(server: ServerProcess, path: str, body: bytes, headers: dict[str, str],
                                       status: int, says: str) -> None:  # fmt: skip
    head, answer = _both_ways(server.http_port, path, body, headers)
    assert _status(head) == status, answer
    assert says.lower() in json.loads(answer)["error"].lower()


def test_tritonclient_keep_alive_connection_is_served_directly(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for i in range(20):
        inputs = [httpclient.InferInput(f"INPUT{k}", [1, 4], "FP32") for k in range(2)]
        inputs[0].set_data_from_numpy(A + i)
        inputs[1].set_data_from_numpy(B)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + i + B)
    assert Path(server.log_path).read_text().count("Exception in ASGI application") == 0


AUTH = """
tenants:
  alice:
    keys: [{alice}]
    models: ["add_*"]
"""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("direct-auth")
    repo = write_repository(root / "models", {"add_sub": add_sub(), "picky": simple(PICKY_CONFIG, PICKY_PY)})
    (root / "auth.yaml").write_text(AUTH.format(alice=digest("alice-key")))
    with ServerProcess([repo], [f"--auth-config={root / 'auth.yaml'}"]) as srv:
        yield srv


@pytest.mark.parametrize(
    ("model", "key", "status"),
    [("add_sub", "alice-key", 200), ("add_sub", None, 401), ("add_sub", "wrong", 401), ("picky", "alice-key", 404)],
)
def test_access_rules_answer_the_same_both_ways(
    guarded: ServerProcess, model: str, key: str | None, status: int
) -> None:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    body = _json_body() if model == "add_sub" else b'{"inputs": []}'
    head, answer = _both_ways(guarded.http_port, f"/v2/models/{model}/infer", body, headers)
    assert _status(head) == status, answer


def test_bad_requests_on_the_direct_path_get_errors_and_the_server_stays_up(server: ServerProcess) -> None:
    rng = np.random.default_rng(7)
    port = server.http_port
    for i in range(40):  # random bodies, with and without a binary header length
        body = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
        headers = {"Inference-Header-Content-Length": str(int(rng.integers(0, len(body) + 1)))} if i % 2 else {}
        head, answer = _exchange(port, _request("/v2/models/add_sub/infer", body, headers, chunked=False))
        assert _status(head) == 400, (i, head, answer)
        assert "error" in json.loads(answer)
    # Junk after a good request in the same read: uvicorn answers HTTP's own 400 and closes the
    # connection (on the ASGI path too: the good request's answer is dropped with it).
    good = _request("/v2/models/add_sub/infer", _json_body(), {}, chunked=False)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(good + b"\x00\x01 not HTTP at all\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert b"HTTP/1.1 400 Bad Request" in data and data.endswith(b"Invalid HTTP request received.")
    # A Content-Length that is not a number never reaches the handler.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n0123456789")
        assert sock.recv(65536).startswith(b"HTTP/1.1 400")
    head, answer = _both_ways(port, "/v2/models/add_sub/infer", _json_body())
    assert _status(head) == 200
