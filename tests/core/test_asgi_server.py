"""The ASGI server's event loop and connection transport (real sockets, real uvicorn)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from inferd.serving import AsgiServer, run
from inferd.serving.writes import HeldWrites


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert run(_loop_module()).startswith("uvloop")


def test_run_returns_the_coroutines_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run(answer()) == 42


class _Recording(asyncio.Transport):
    """A transport that records each call that would be one ``send`` system call."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.sends.append(bytes(data))

    def writelines(self, list_of_data: object) -> None:
        self.sends.append(b"".join(bytes(d) for d in list_of_data))  # type: ignore[attr-defined]

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def test_held_writes_send_once_on_flush_and_by_the_next_loop_turn() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], list[bytes]]:
        inner = _Recording()
        held = HeldWrites(inner)
        held.write(b"head ")
        held.write(memoryview(b"body"))
        before = list(inner.sends)
        held.flush()
        flushed = list(inner.sends)
        held.write(b"100 Continue")  # nothing flushes it but the loop's next turn
        await asyncio.sleep(0)
        return before, flushed, inner.sends

    before, flushed, after = run(scenario())
    assert before == []
    assert flushed == [b"head body"]
    assert after == [b"head body", b"100 Continue"]


def test_held_writes_flush_before_close_and_drop_once_closing() -> None:
    async def scenario() -> tuple[list[bytes], bool]:
        inner = _Recording()
        held = HeldWrites(inner)
        held.write(b"bye")
        held.close()
        held.write(b"late")
        await asyncio.sleep(0)
        return inner.sends, held.is_closing()

    assert run(scenario()) == ([b"bye"], True)


async def _parts_app(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
    """Answers with its body in two messages after a head (a tensor response's layout)."""
    if scope["type"] != "http":
        return
    while True:
        message = await receive()  # type: ignore[operator]
        if not message.get("more_body"):
            break
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"hello", "more_body": True})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": memoryview(b" world")})  # type: ignore[operator]


def _exchange(port: int, request: bytes, size: int, then: bytes | None = None) -> bytes:
    """Send ``request`` (and ``then`` once the first bytes came back); read ``size`` bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        got = sock.recv(65536)
        if then is not None:
            sock.sendall(then)
        while len(got) < size:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\nhello world"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def test_uvicorn_answers_through_held_writes_pipelined_and_with_100_continue() -> None:
    async def scenario() -> tuple[bytes, bytes]:
        server = AsgiServer(_parts_app, "127.0.0.1", 0, "test")
        await server.start()
        loop = asyncio.get_running_loop()
        try:
            get = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
            pipelined = await loop.run_in_executor(None, _exchange, server.port, get + get, 2 * len(_ANSWER))
            expect = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n"
            size = len(_CONTINUE + _ANSWER)
            continued = await loop.run_in_executor(None, _exchange, server.port, expect, size, b"abc")
        finally:
            await server.stop(1.0)
        return pipelined, continued

    pipelined, continued = run(scenario())
    assert pipelined == _ANSWER + _ANSWER
    assert continued == _CONTINUE + _ANSWER


def test_held_writes_writelines_sends_what_is_held_first_in_one_send() -> None:
    async def scenario() -> list[bytes]:
        inner = _Recording()
        held = HeldWrites(inner)
        held.write(b"held ")
        held.writelines([b"head ", memoryview(b"body")])
        await asyncio.sleep(0)  # the scheduled flush finds nothing left
        return inner.sends

    assert run(scenario()) == [b"held head body"]
