"""Request size limits against a real ``inferd serve``: ``--http-max-input-size`` (Triton's flag,
64 MiB by default, answered with 400 as Triton does) and ``--grpc-max-message-bytes``, each
refused before the body is read, the server up after."""

from __future__ import annotations

import http.client
import json
import select
import socket
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e.h2_client import RawConnection
from tests.servers import Servers

LIMIT = 1 << 20  # the small server's --http-max-input-size
DEFAULT = 1 << 26  # Triton's default: 64 MiB


ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                                                            .as_numpy())]) for r in requests]
"""
ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("limits")
    return write_repository(root / "models", {"echo": {"config.pbtxt": ECHO_CONFIG, "1/model.py": ECHO}})


@pytest.fixture(scope="module")
def small(repo: Path, serve: Servers) -> ServerProcess:
    return serve(repo, f"--http-max-input-size={LIMIT}", f"--grpc-max-message-bytes={LIMIT}")


@pytest.fixture(scope="module")
def default(repo: Path, serve: Servers) -> ServerProcess:
    return serve(repo)


def _head(length: int | None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (f"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"{framing}\r\n\r\n").encode()  # fmt: skip


def _send_until_answered(port: int, head: bytes, chunk: bytes, most: int) -> tuple[bytes, int]:
    """Send ``head`` then ``chunk`` repeatedly (up to ``most`` bytes) until the server answers;
    returns what it answered and how many body bytes were sent by then."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        while sent < most:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        select.select([sock], [], [], 30)
        answer = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break  # the server closed the connection after refusing
            answer += data
    return answer, sent


def _error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)["error"]


def test_a_content_length_over_the_default_limit_is_refused_before_any_body_is_sent(default):
    answer, sent = _send_until_answered(default.http_port, _head(10 * 2**30), b"", 0)  # 10 GiB announced
    assert sent == 0
    assert _error(answer) == (400, "Request body size of 10737418240 bytes exceeds the maximum allowed value of "
                                   f"{DEFAULT} bytes. Use --http-max-input-size to increase the limit.")  # fmt: skip
    assert b"connection: close" in answer.lower()
    assert httpclient.InferenceServerClient(default.http_url).is_server_ready()


def test_a_chunked_body_is_refused_as_it_passes_the_limit(small):
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    answer, sent = _send_until_answered(small.http_port, _head(None), chunk, 256 * LIMIT)  # would be 256 MiB
    status, message = _error(answer)
    assert status == 400
    assert message == (f"Request body size (more than {LIMIT} bytes, chunked) exceeds the maximum allowed value "
                       f"of {LIMIT} bytes. Use --http-max-input-size to increase the limit.")  # fmt: skip
    assert sent < 64 * LIMIT  # answered long before the whole body went out (socket buffers aside)


def test_requests_under_the_limit_are_served_and_over_it_refused_by_tritonclient(small):
    client = httpclient.InferenceServerClient(small.http_url)
    ok = np.arange(1000, dtype=np.int32)
    big = np.zeros(LIMIT // 4 + 1000, np.int32)  # binary body a little over the limit
    for data, refused in ((ok, False), (big, True), (ok, False)):
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "INT32")
        tensor.set_data_from_numpy(data, binary_data=True)
        if refused:
            with pytest.raises(InferenceServerException, match="exceeds the maximum allowed value of 1048576 bytes"):
                client.infer("echo", [tensor])
            continue
        np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("OUTPUT0"), data)


@pytest.fixture(scope="module")
def small_grpcio(repo: Path, serve: Servers) -> ServerProcess:
    return serve(repo, f"--grpc-max-message-bytes={LIMIT}", "--grpc-transport=grpcio")


@pytest.mark.parametrize("transport", ["h2", "grpcio"])
def test_a_grpc_message_over_the_limit_is_refused_and_the_server_stays_up(request, transport):
    server = request.getfixturevalue("small" if transport == "h2" else "small_grpcio")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        big = np.zeros(LIMIT // 4 + 1000, np.int32)
        tensor = grpcclient.InferInput("INPUT0", list(big.shape), "INT32")
        tensor.set_data_from_numpy(big)
        with pytest.raises(InferenceServerException) as err:
            client.infer("echo", [tensor])
        assert "RESOURCE_EXHAUSTED" in str(err.value.status()) and "larger than max" in str(err.value)
        assert client.is_server_ready() and client.is_model_ready("echo")


def test_a_grpc_message_declaring_more_than_the_limit_is_refused_before_its_bytes_arrive(small):
    conn = RawConnection(small.grpc_port)
    try:  # the prefix says 1 GiB; only 10 bytes follow and the stream stays open
        stream = conn.call("/inference.GRPCInferenceService/ModelInfer", b"\0" + (2**30).to_bytes(4, "big") + b"x" * 10,
                           end=False)  # fmt: skip
        answer = conn.wait(stream.stream_id)
    finally:
        conn.close()
    assert answer.trailers[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED
    assert (
        unquote(answer.trailers[b"grpc-message"].decode()) == f"Received message larger than max ({2**30} vs. {LIMIT})"
    )
    with grpcclient.InferenceServerClient(small.grpc_url) as client:
        assert client.is_server_ready()


def test_a_compressed_body_is_refused_as_it_inflates_past_the_limit(small):
    import gzip

    bomb = gzip.compress(b" " * (64 * LIMIT))  # 64 MiB of spaces in about 64 KiB
    assert len(bomb) < LIMIT
    conn = http.client.HTTPConnection("127.0.0.1", small.http_port, timeout=30)
    conn.request(
        "POST", "/v2/models/echo/infer", bomb, {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    reply = conn.getresponse()
    assert (reply.status, json.loads(reply.read())["error"]) == (400, (
        f"Request body size (more than {LIMIT} bytes once inflated) exceeds the maximum allowed value of {LIMIT} "
        "bytes. Use --http-max-input-size to increase the limit."))  # fmt: skip
    conn.close()
    client = httpclient.InferenceServerClient(small.http_url)  # a body inflating within the limit is served
    data = np.arange(100, dtype=np.int32)
    tensor = httpclient.InferInput("INPUT0", [100], "INT32")
    tensor.set_data_from_numpy(data, binary_data=False)
    result = client.infer("echo", [tensor], request_compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_a_chunked_body_over_the_limit_on_another_route_is_refused_without_a_traceback(small):
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    head = b"POST /v2/repository/models/echo/load HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer, _ = _send_until_answered(small.http_port, head, chunk, 64 * LIMIT)
    assert _error(answer)[0] == 400 and "exceeds the maximum allowed value" in _error(answer)[1]
    assert "Traceback" not in small.log()
    assert httpclient.InferenceServerClient(small.http_url).is_model_ready("echo")
