"""HTTP/1.1 protocol edge cases, over raw sockets against a real ``inferd serve`` on loopback.

Pipelined requests answered in order whichever path answers them (direct route, ASGI, chunked),
chunked uploads in many pieces, ``Expect: 100-continue``, bodies over ``--http-max-input-size``,
bytes that are not HTTP, HTTP/1.0, and a client that reads its answers slowly.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers

INFER = "/v2/models/add_sub/infer"
#: The server's --http-max-input-size here: small, so a test can pass it.
MAX_INPUT = 16384
BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 30\r\n"
    b"connection: close\r\n\r\nInvalid HTTP request received."
)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--http-max-input-size", str(MAX_INPUT))


def connect(server: ServerProcess, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", server.http_port))
    return sock


def infer_body(first: float) -> bytes:
    """add_sub's request: INPUT0 = first..first+3, INPUT1 = ones (so OUTPUT0 = INPUT0 + 1)."""
    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [first + i for i in range(4)]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
    ]
    return json.dumps({"inputs": inputs}).encode()


def expected_output0(first: float) -> list[float]:
    return [first + i + 1 for i in range(4)]


def post(path: str, body: bytes, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    head = b"POST %s HTTP/%s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
    return head % (path.encode(), version, len(body), extra) + body


def chunked(path: str, body: bytes, pieces: int) -> list[bytes]:
    """A chunked POST as the writes a client makes: the head, then ``pieces`` chunks, then the end."""
    size = -(-len(body) // pieces)
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    return [head % path.encode(), *(b"%x\r\n%s\r\n" % (len(p), p) for p in parts), b"0\r\n\r\n"]


def get(path: str) -> bytes:
    return b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode()


class Reader:
    """Reads HTTP/1.1 responses one after another from a socket (Content-Length or chunked)."""

    def __init__(self, sock: socket.socket, piece: int = 65536, pause: float = 0.0) -> None:
        self.sock = sock
        self.piece = piece
        self.pause = pause
        self.buffer = b""

    def _more(self) -> None:
        if self.pause:
            time.sleep(self.pause)
        chunk = self.sock.recv(self.piece)
        if not chunk:
            raise EOFError(self.buffer[:200])
        self.buffer += chunk

    def _take_until(self, marker: bytes) -> bytes:
        while (end := self.buffer.find(marker)) < 0:
            self._more()
        taken, self.buffer = self.buffer[:end], self.buffer[end + len(marker) :]
        return taken

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._more()
        taken, self.buffer = self.buffer[:size], self.buffer[size:]
        return taken

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next response: status, headers by lower-case name, body."""
        lines = self._take_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self._take_until(b"\r\n"), 16):
                body += self._take(size)
                self._take(2)
            self._take(2)
        else:
            body = self._take(int(headers.get("content-length", "0")))
        return status, headers, body

    def closed(self) -> bool:
        """Whether the server closes the connection with nothing more to say."""
        try:
            self._more()
        except EOFError:
            return not self.buffer
        return False


def output0(body: bytes) -> list[float]:
    answer = json.loads(body)
    (out,) = [o for o in answer["outputs"] if o["name"] == "OUTPUT0"]
    return [float(v) for v in out["data"]]


def assert_up(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(post(INFER, infer_body(7)))
        status, _, body = Reader(sock).response()
    assert status == 200 and output0(body) == expected_output0(7), body


def test_pipelined_requests_are_answered_in_order_whichever_path_answers(server: ServerProcess) -> None:
    """Direct-route infers, an ASGI GET and a chunked infer (ASGI) sent in one write: one answer
    each, in the order asked, each with its own values."""
    requests = [
        post(INFER, infer_body(0)),
        get("/v2/models/add_sub"),
        b"".join(chunked(INFER, infer_body(10), 3)),
        post(INFER, infer_body(20)),
        post("/v2/models/add_sub/versions/1/infer", infer_body(30)),
    ]
    with connect(server) as sock:
        sock.sendall(b"".join(requests))
        reader = Reader(sock)
        answers = [reader.response() for _ in requests]
    assert [status for status, _, _ in answers] == [200] * 5, answers
    assert output0(answers[0][2]) == expected_output0(0)
    assert json.loads(answers[1][2])["name"] == "add_sub"
    assert output0(answers[2][2]) == expected_output0(10)
    assert output0(answers[3][2]) == expected_output0(20)
    assert output0(answers[4][2]) == expected_output0(30)


def test_a_chunked_upload_in_many_pieces_is_served(server: ServerProcess) -> None:
    writes = chunked(INFER, infer_body(5), 12)
    with connect(server) as sock:
        for data in writes:  # each piece its own write, a little apart: the server reads them one by one
            sock.sendall(data)
            time.sleep(0.02)
        status, _, body = Reader(sock).response()
        sock.sendall(post(INFER, infer_body(6)))  # the connection is kept alive after it
        again = Reader(sock).response()
    assert status == 200 and output0(body) == expected_output0(5), body
    assert again[0] == 200 and output0(again[2]) == expected_output0(6)


def test_expect_100_continue_is_answered_before_the_body_is_sent(server: ServerProcess) -> None:
    body = infer_body(3)
    with connect(server) as sock:
        head = post(INFER, b"", b"Expect: 100-continue\r\n").replace(
            b"Content-Length: 0", b"Content-Length: %d" % len(body)
        )
        sock.sendall(head)
        reader = Reader(sock)
        interim = reader._take_until(b"\r\n\r\n")  # nothing of the body sent yet
        sock.sendall(body)
        status, _, answer = reader.response()
    assert interim == b"HTTP/1.1 100 Continue"
    assert status == 200 and output0(answer) == expected_output0(3), answer


def test_a_body_over_the_limit_with_expect_is_refused_without_100_continue(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(
            post(INFER, b"", b"Expect: 100-continue\r\n").replace(b"Content-Length: 0", b"Content-Length: 20000")
        )
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert reader.closed()
    assert status == 400 and headers["connection"] == "close"
    assert json.loads(body)["error"].startswith(
        f"Request body size of 20000 bytes exceeds the maximum allowed value of {MAX_INPUT} bytes."
    )


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_over_the_limit_is_refused_and_the_connection_closed(server: ServerProcess, framing: str) -> None:
    big = b'{"inputs": [' + b" " * (MAX_INPUT + 1000) + b"]}"
    request = post(INFER, big) if framing == "content-length" else b"".join(chunked(INFER, big, 8))
    with connect(server) as sock:
        sock.sendall(request)
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert reader.closed()
    size = f"of {len(big)} bytes" if framing == "content-length" else f"(more than {MAX_INPUT} bytes, chunked)"
    assert status == 400 and headers["connection"] == "close"
    assert json.loads(body)["error"].startswith(f"Request body size {size} exceeds the maximum allowed value")
    assert_up(server)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(32), id="tls-hello-on-clear-port"),
        pytest.param(b"NOT A REQUEST LINE\r\n\r\n", id="request-line"),
        pytest.param(b"GET /v2/health/ready HTTP/1.1\r\nHost x\r\n\r\n", id="header-without-colon"),
        pytest.param(b"GET /v2 health HTTP/1.1\r\nHost: x\r\n\r\n", id="space-in-target"),
        pytest.param(
            b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", id="negative-length"
        ),
    ],
)
def test_bytes_that_are_not_http_are_answered_400_and_closed(server: ServerProcess, garbage: bytes) -> None:
    with connect(server) as sock:
        sock.sendall(garbage)
        reader = Reader(sock)
        got = reader._take(len(BAD_REQUEST))
        assert reader.closed()
    assert got == BAD_REQUEST
    assert_up(server)


def test_http_1_0_requests_are_answered_and_closed(server: ServerProcess) -> None:
    for request in (b"GET /v2/health/ready HTTP/1.0\r\n\r\n", post(INFER, infer_body(1), version=b"1.0")):
        with connect(server) as sock:
            sock.sendall(request)
            reader = Reader(sock)
            status, headers, body = reader.response()
            assert reader.closed()
        assert status == 200 and headers["connection"] == "close", (request, headers)
    assert output0(body) == expected_output0(1)


def test_a_client_that_reads_slowly_gets_every_answer_whole_and_in_order(server: ServerProcess) -> None:
    """Hundreds of pipelined requests from a client with a tiny receive buffer that reads its
    answers late and in small pieces: the server holds what it cannot send, and every answer
    arrives whole, in order."""
    count = 300
    requests = [post(INFER, infer_body(i)) if i % 3 else get("/v2/models/add_sub/config") for i in range(count)]
    with connect(server, rcvbuf=4096) as sock:
        sock.sendall(b"".join(requests))
        time.sleep(1.0)  # the server answers into full buffers meanwhile
        reader = Reader(sock, piece=2048, pause=0.001)
        answers = [reader.response() for _ in range(count)]
    config = answers[0][2]
    assert json.loads(config)["name"] == "add_sub"
    for i, (status, _, body) in enumerate(answers):
        assert status == 200, (i, body)
        if i % 3:
            assert output0(body) == expected_output0(i), i
        else:
            assert body == config, i
    assert_up(server)
