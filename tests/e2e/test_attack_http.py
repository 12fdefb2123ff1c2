"""Attacks on the HTTP/1.1 port, over raw sockets against a real ``inferd serve`` on loopback.

What must hold: memory stays bounded per connection (a client that pipelines requests without
reading the answers, a huge header), slow senders are closed (``--http-header-timeout-secs``),
request smuggling is refused, many idle connections do not stop the server, and a drain
(``--drain-delay-secs``) closes keep-alive connections with ``Connection: close`` instead of
resetting requests. Every attack is bounded in time (seconds).
"""

from __future__ import annotations

import http.client
import signal
import socket
import threading
import time

import pytest

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.attack import RSS_GROWTH_MB, non_reader, read_until_closed, rss_mb, send_for
from tests.servers import Servers

#: The header timeout of the servers here: short, so a test waits for it.
TIMEOUT = 2.0
#: The longest a test waits for a close the timeout should cause (a busy machine is slow).
CLOSE_WITHIN = 15.0
INFER = b"/v2/models/add_sub/infer"
BODY = (
    b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]},'
    b'{"name":"INPUT1","datatype":"FP32","shape":[1,4],"data":[1,1,1,1]}]}'
)


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()}, "--http-header-timeout-secs", str(TIMEOUT))


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=10)


def exchange(server: ServerProcess, request: bytes) -> bytes:
    """Send ``request`` on a new connection; everything the server answers until it closes or goes quiet."""
    with connect(server) as sock:
        sock.sendall(request)
        answer, _closed = read_until_closed(sock, 3.0)
    return answer


def assert_up(server: ServerProcess) -> None:
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request("POST", INFER.decode(), BODY, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        conn.close()


# -- memory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(b"POST " + INFER + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
                     id="direct-infer"),
        pytest.param(b"GET /v2/models/add_sub/config HTTP/1.1\r\nHost: x\r\n\r\n", id="asgi-get"),
        pytest.param(b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
                     id="asgi-post"),
    ],
)  # fmt: skip
def test_pipelined_requests_from_a_client_that_does_not_read_hold_bounded_memory(server, request_bytes):
    """Requests pipelined for seconds by a client that reads no answer: the server stops reading
    once its unsent answers pass the write buffer's mark, so its memory stays flat."""
    before = rss_mb(server)
    sock = non_reader(server.http_port)
    try:
        sent = send_for(sock, request_bytes * 200, seconds=4.0)
        grown = rss_mb(server) - before
    finally:
        sock.close()
    assert grown < RSS_GROWTH_MB, f"RSS grew {grown:.0f} MB after {sent / 1e6:.1f} MB of pipelined requests"
    assert_up(server)


@pytest.mark.parametrize(
    ("path", "body"),
    [pytest.param(INFER, BODY, id="direct-infer"), pytest.param(b"/v2/repository/index", b"{}", id="asgi-post")],
)
def test_a_pipelined_request_whose_body_comes_later_is_answered(server, path, body):
    """A request pipelined behind one the app answers, its body cut short and the rest sent once the
    first is answered: the server reads it (the old code left reading paused after starting the
    queued request, which then waited for its body forever; and a client that closed such a
    connection was never noticed, holding the server's stop for --exit-timeout-secs)."""
    first = b"GET /v2/models/add_sub/config HTTP/1.1\r\nHost: x\r\n\r\n"
    head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    cut = len(body) // 2
    with connect(server) as sock:
        sock.sendall(first + head % len(body) + body[:cut])
        received, deadline = b"", time.monotonic() + CLOSE_WITHIN
        while b"\r\n\r\n" not in received and time.monotonic() < deadline:  # the first answer (it stays open)
            more, closed = read_until_closed(sock, 0.5)
            received += more
            if closed:
                break
        received += read_until_closed(sock, 0.3)[0]  # the rest of its body
        assert received.startswith(b"HTTP/1.1 200"), received
        sock.sendall(body[cut:])
        deadline = time.monotonic() + CLOSE_WITHIN
        while received.count(b"HTTP/1.1 200") < 2 and time.monotonic() < deadline:
            more, closed = read_until_closed(sock, 0.5)
            received += more
            if closed:
                break
    assert received.count(b"HTTP/1.1 200") == 2, received


def test_a_1mb_header_is_refused_with_431_before_it_is_read(server):
    before = rss_mb(server)
    with connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = send_for(sock, b"a" * 65536, seconds=3.0)  # up to 1 MB, or until the server closes
        answer, closed = read_until_closed(sock, 5.0)
    assert closed
    assert sent < (1 << 20) or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert answer.startswith(b"HTTP/1.1 431 ") or not answer, answer[:200]
    assert rss_mb(server) - before < RSS_GROWTH_MB


def test_a_header_under_the_limit_is_served(server):
    answer = exchange(server, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_many_headers_over_the_limit_in_several_reads_are_refused(server):
    with connect(server) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        for i in range(30):  # 30 x 8 KB, each its own read
            try:
                sock.sendall(b"X-H%d: %s\r\n" % (i, b"b" * 8000))
            except OSError:
                break
            time.sleep(0.01)
        answer, closed = read_until_closed(sock, 5.0)
    assert closed and answer.startswith(b"HTTP/1.1 431 "), answer[:200]


# -- slow senders ---------------------------------------------------------------------------------


def test_a_slow_header_is_closed_after_the_timeout(server):
    """Slowloris: a head sent a few bytes at a time, never finished."""
    with connect(server) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        closed = False
        while not closed and time.monotonic() - start < CLOSE_WITHIN:
            try:
                sock.sendall(b"X-A: b\r\n")
            except OSError:
                closed = True
                break
            _answer, closed = read_until_closed(sock, 0.5)
    assert closed, f"a slow head was still open after {CLOSE_WITHIN} s"
    assert time.monotonic() - start >= TIMEOUT * 0.9


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(server):
    with connect(server) as sock:
        _answer, closed = read_until_closed(sock, CLOSE_WITHIN)
    assert closed


def test_a_stalled_body_is_closed_after_the_timeout(server):
    with connect(server) as sock:
        sock.sendall(b"POST " + INFER + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
        _answer, closed = read_until_closed(sock, CLOSE_WITHIN)
    assert closed


def test_a_slow_but_steady_body_is_served(server):
    """A body that keeps coming (a byte every half timeout) is not cut off."""
    with connect(server) as sock:
        sock.sendall(b"POST " + INFER + b" HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(BODY))
        for i in range(0, len(BODY), len(BODY) // 4 + 1):
            time.sleep(TIMEOUT / 2)
            sock.sendall(BODY[i : i + len(BODY) // 4 + 1])
        answer, _closed = read_until_closed(sock, 3.0)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_many_idle_connections_do_not_stop_the_server_and_are_closed(server):
    socks = [connect(server) for _ in range(500)]
    try:
        assert_up(server)
        deadline = time.monotonic() + CLOSE_WITHIN
        for sock in socks:
            _answer, closed = read_until_closed(sock, max(0.1, deadline - time.monotonic()))
            assert closed
    finally:
        for sock in socks:
            sock.close()


# -- smuggling (already refused; must stay so) ----------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", id="CL+TE"),
        pytest.param(b"Content-Length: 5\r\nContent-Length: 6\r\n", id="duplicate-CL"),
        pytest.param(b"Content-Length: 5\r\n x: folded\r\n", id="obs-fold"),
        pytest.param(b"Content-Length: 5\nX-A: b\r\n", id="bare-LF"),
        pytest.param(b"Transfer-Encoding: chunked, identity\r\n", id="TE-not-chunked-last"),
    ],
)
def test_ambiguous_framing_is_refused(server, head):
    answer = exchange(server, b"POST " + INFER + b" HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1  # nothing smuggled behind it


def test_a_huge_content_length_is_refused_unread(server):
    answer = exchange(server, b"POST " + INFER + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


def test_a_websocket_upgrade_is_answered_as_plain_http(server):
    """inferd serves no WebSocket API: an upgrade request gets the route's plain answer, and uvicorn's
    WebSocket protocol (and the websockets library) is neither loaded nor reachable."""
    request = (b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
               b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")  # fmt: skip
    with connect(server) as sock:
        sock.sendall(request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
    assert head.startswith(b"HTTP/1.1 200 "), head[:200]
    assert b"upgrade" not in head.lower()
    assert_up(server)


# -- drain ----------------------------------------------------------------------------------------


def test_drain_closes_keep_alive_connections_and_resets_no_request(tmp_path):
    """Keep-alive clients hammer the server through its drain: every answer during the drain says
    ``Connection: close``, no request is reset, and after the drain the port refuses connections.

    The clients open new connections during the drain as they like, but not in its last second:
    by then a load balancer has taken the server out (readiness went false when the drain began),
    and a connection whose handshake the kernel completes just as the listener closes is reset by
    the kernel, not by inferd (the old code reset keep-alive requests in flight)."""
    drain = 2.0  # the clients hammer its first second (the load balancer takes the server out in the last)
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    server = ServerProcess([repo], ["--drain-delay-secs", str(drain)]).start()
    stop = threading.Event()
    drain_began: list[float] = []
    results: dict[str, int] = {"ok": 0, "close": 0, "reconnected": 0}
    resets: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection(server.http_url, timeout=10)
        while not stop.is_set():
            try:
                conn.request("POST", INFER.decode(), BODY, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                with lock:
                    resets.append(f"{type(exc).__name__}: {exc}")
                return
            closing = response.getheader("connection", "").lower() == "close"
            with lock:
                results["ok"] += 1
                results["close"] += bool(drain_began) and closing
            if closing:
                conn.close()  # the next request opens a new connection, as a client would
                if drain_began and time.monotonic() > drain_began[0] + drain - 1.0:
                    return  # the load balancer no longer sends here
                results["reconnected"] += bool(drain_began)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        drain_began.append(time.monotonic())
        server.proc.wait(30)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        server.stop()
    assert not resets, resets
    assert results["close"] > 0 and results["reconnected"] > 0, results
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.http_port), timeout=5).close()
