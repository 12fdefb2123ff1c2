"""Direct routes (``inferd.serving.direct``) on a real uvicorn server and real sockets: which requests
they take, that their answers are the bytes the ASGI path writes for the same reply, and the
connection's bookkeeping (pipelining, keep-alive, disconnects, errors, graceful shutdown)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from inferd.serving import AsgiServer, Handler, Headers, Reply, run
from inferd.serving.direct import takes_directly

MAX_BODY = 4096


class Routes:
    """Takes POST /direct...; records who answered what. Both ways answer ``echo:<body>``."""

    max_body = MAX_BODY

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []
        self.gate: asyncio.Event | None = None  # when set, direct handlers wait for it

    def handler(self, method: bytes, path: str) -> Handler | None:
        if not path.startswith("/direct"):
            return None
        return self._fail if path == "/direct/fail" else self._echo

    async def _echo(self, headers: Headers, body: bytes) -> Reply:
        self.seen.append(("direct", body))
        if self.gate is not None:
            await self.gate.wait()
        return _reply(body)

    async def _fail(self, headers: Headers, body: bytes) -> Reply:
        raise RuntimeError("a handler bug")

    async def asgi(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                   send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:  # fmt: skip
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append(("asgi", body))
        reply = _reply(body)
        await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
        await send({"type": "http.response.body", "body": reply.parts[0], "more_body": True})
        await send({"type": "http.response.body", "body": reply.parts[1]})


def _reply(body: bytes) -> Reply:
    parts: list[bytes | memoryview] = [b"echo:", memoryview(body)]
    length = str(5 + len(body)).encode()
    return Reply(200, [(b"content-type", b"text/plain"), (b"content-length", length)], parts)


def _post(body: bytes, path: str = "/direct", extra: str = "", version: str = "1.1") -> bytes:
    return f"POST {path} HTTP/{version}\r\nhost: x\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


def _chunked(body: bytes) -> bytes:
    head = b"POST /direct HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _answer(body: bytes, close: bool = False) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n%s\r\n" % (5 + len(body), connection)
    return head + b"echo:" + body


def _read(sock: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _exchange(port: int, *writes: bytes, size: int) -> bytes:
    """Send each of ``writes`` (a short pause between them); read ``size`` bytes or to the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for i, data in enumerate(writes):
            if i:
                _pause()
            sock.sendall(data)
        return _read(sock, size)


def _pause() -> None:
    time.sleep(0.05)  # the server's loop reads what came so far before the rest arrives


Scenario = Callable[[AsgiServer, Routes], Awaitable[Any]]


def _serve(scenario: Scenario, keep_alive_secs: float = 75.0) -> tuple[Any, Routes]:
    async def main() -> Any:
        routes = Routes()
        server = AsgiServer(routes.asgi, "127.0.0.1", 0, "test", direct=routes, keep_alive_secs=keep_alive_secs)
        await server.start()
        try:
            return await scenario(server, routes), routes
        finally:
            await server.stop(2.0)

    return run(main())


def _in_thread(function: Callable[..., bytes], *args: Any, **kw: Any) -> Awaitable[bytes]:
    return asyncio.get_running_loop().run_in_executor(None, lambda: function(*args, **kw))


def test_posts_with_a_length_go_direct_and_everything_else_over_asgi_with_the_same_bytes() -> None:
    body = b"0123456789"
    cases = [
        (_post(body), "direct"),
        (_chunked(body), "asgi"),
        (_post(body, "/other"), "asgi"),
        (_post(body, "/di%72ect"), "asgi"),  # an encoded path: ASGI decodes it
        (_post(b"x" * (MAX_BODY + 1)), "asgi"),  # over the limit: ASGI's body limit applies
    ]

    async def scenario(server: AsgiServer, routes: Routes) -> list[bytes]:
        return [await _in_thread(_exchange, server.port, raw, size=len(_answer(body))) for raw, _ in cases]

    answers, routes = _serve(scenario)
    assert [way for way, _ in routes.seen] == [way for _, way in cases]
    for (raw, _), answer, (_, seen) in zip(cases, answers, routes.seen, strict=True):
        assert answer == _answer(seen), raw[:40]
    assert answers[0] == answers[1] == _answer(body)  # direct and ASGI: byte for byte


def test_takes_directly_needs_one_length_within_the_limit_and_no_expect_or_chunking() -> None:
    assert takes_directly([(b"content-length", b"10")], 10)
    assert not takes_directly([(b"content-length", b"11")], 10)
    assert not takes_directly([], 10)
    assert not takes_directly([(b"content-length", b"1"), (b"content-length", b"1")], 10)
    assert not takes_directly([(b"content-length", b"-1")], 10)
    assert not takes_directly([(b"content-length", b"1"), (b"expect", b"100-continue")], 10)
    assert not takes_directly([(b"content-length", b"1"), (b"transfer-encoding", b"chunked")], 10)


def test_pipelined_requests_mixing_both_ways_are_answered_in_order() -> None:
    bodies = [b"first", b"second", b"third", b"fourth"]
    raw = _post(bodies[0]) + _chunked(bodies[1]) + _post(bodies[2]) + _post(bodies[3])
    expected = b"".join(_answer(b) for b in bodies)

    async def scenario(server: AsgiServer, routes: Routes) -> bytes:
        return await _in_thread(_exchange, server.port, raw, size=len(expected))

    answer, routes = _serve(scenario)
    assert answer == expected
    assert routes.seen == [("direct", b"first"), ("asgi", b"second"), ("direct", b"third"), ("direct", b"fourth")]


def test_a_body_arriving_in_parts_is_handed_over_whole() -> None:
    body = bytes(range(256)) * 15  # 3,840 bytes, under the limit
    raw = _post(body)
    parts = (raw[:20], raw[20:200], raw[200:2000], raw[2000:])

    async def scenario(server: AsgiServer, routes: Routes) -> bytes:
        return await _in_thread(_exchange, server.port, *parts, size=len(_answer(body)))

    answer, routes = _serve(scenario)
    assert answer == _answer(body)
    assert routes.seen == [("direct", body)]


@pytest.mark.parametrize(("extra", "version"), [("connection: close\r\n", "1.1"), ("", "1.0")])
def test_a_request_without_keep_alive_is_answered_with_connection_close_and_closed(extra: str, version: str) -> None:
    async def scenario(server: AsgiServer, routes: Routes) -> bytes:
        return await _in_thread(_exchange, server.port, _post(b"bye", extra=extra, version=version), size=1 << 20)

    answer, routes = _serve(scenario)
    assert answer == _answer(b"bye", close=True)  # read to the end: the server closed it
    assert routes.seen == [("direct", b"bye")]


def test_a_failing_handler_answers_500_as_uvicorn_does_and_the_server_stays_up() -> None:
    expected = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error")  # fmt: skip

    async def scenario(server: AsgiServer, routes: Routes) -> tuple[bytes, bytes]:
        failed = await _in_thread(_exchange, server.port, _post(b"x", "/direct/fail"), size=1 << 20)
        after = await _in_thread(_exchange, server.port, _post(b"ok"), size=len(_answer(b"ok")))
        return failed, after

    (failed, after), routes = _serve(scenario)
    assert failed == expected
    assert after == _answer(b"ok")


def test_a_client_gone_before_its_body_is_complete_is_never_handled() -> None:
    async def scenario(server: AsgiServer, routes: Routes) -> bytes:
        def leave() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(_post(b"0123456789")[:-4])  # six of ten body bytes
            return b""

        await _in_thread(leave)
        await asyncio.sleep(0.2)
        return await _in_thread(_exchange, server.port, _post(b"next"), size=len(_answer(b"next")))

    answer, routes = _serve(scenario)
    assert answer == _answer(b"next")
    assert routes.seen == [("direct", b"next")]


def test_graceful_shutdown_finishes_a_direct_request_in_flight_and_closes_its_connection() -> None:
    async def scenario(server: AsgiServer, routes: Routes) -> bytes:
        routes.gate = asyncio.Event()
        pending = _in_thread(_exchange, server.port, _post(b"late"), size=1 << 20)
        while not routes.seen:  # the handler runs, waiting on the gate
            await asyncio.sleep(0.01)
        stopping = asyncio.ensure_future(server.stop(5.0))
        await asyncio.sleep(0.2)
        routes.gate.set()
        await stopping
        return await pending

    answer, _ = _serve(scenario)
    assert answer == _answer(b"late", close=True)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (nothing else arrives)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout_and_a_busy_one_is_not() -> None:
    keep_alive = 0.5

    def idle_then_busy(port: int) -> tuple[bool, bool, bool]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:
            idle.sendall(_post(b"a"))
            assert _read(idle, len(_answer(b"a"))) == _answer(b"a")
            idle_closed = _closed_within(idle, keep_alive * 6)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as busy:
            started = time.monotonic()
            while time.monotonic() - started < keep_alive * 3:  # a request every fifth of the timeout
                busy.sendall(_post(b"b"))
                assert _read(busy, len(_answer(b"b"))) == _answer(b"b")
                time.sleep(keep_alive / 5)
            busy_open = not _closed_within(busy, keep_alive / 5)
            busy_closed_later = _closed_within(busy, keep_alive * 6)
        return idle_closed, busy_open, busy_closed_later

    async def scenario(server: AsgiServer, routes: Routes) -> tuple[bool, bool, bool]:
        return await asyncio.get_running_loop().run_in_executor(None, idle_then_busy, server.port)

    (idle_closed, busy_open, busy_closed_later), _ = _serve(scenario, keep_alive_secs=keep_alive)
    assert idle_closed
    assert busy_open  # kept open through three timeouts of traffic
    assert busy_closed_later  # then closed once idle
