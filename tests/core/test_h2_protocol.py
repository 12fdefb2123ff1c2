"""inferd's own HTTP/2 protocol (``inferd.serving.h2``) over real sockets, in process: the ASGI path
(answers, trailers, an app's failure), a stream whose client grants no window (what the gRPC
reply's stall bound relies on), the idle timer, and graceful shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from inferd.serving import H2Server, run
from tests.e2e.h2_client import GRPC_HEADERS, Answer, RawConnection

CHUNK = bytes(1 << 16)


class App:
    """An ASGI app by path: ``/echo`` (the body back, trailers), ``/boom`` (fails), ``/park`` (writes
    what the client's window does not take, then resets), ``/slow`` (waits for ``release``)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: dict[str, Any] = {}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/boom":
            raise RuntimeError("boom")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if path == "/slow":
            self.seen["slow"] = True
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"application/grpc"), (b"connection", b"close")]})  # fmt: skip
        if path == "/park":
            stream = send.__self__  # what inferd's gRPC reply looks at
            for _ in range(20):
                await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            self.seen["parked"] = stream.pending_bytes
            stream.abort_stream()
            self.seen["disconnected"] = stream.disconnected
            return
        await send({"type": "http.response.body", "body": body, "more_body": False})
        await send({"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False})


def _serve(scenario: Callable[[H2Server, App], Awaitable[Any]], keep_alive_secs: float = 75.0) -> Any:
    async def main() -> Any:
        app = App()
        server = H2Server(app, "127.0.0.1", 0, "test h2", keep_alive_secs=keep_alive_secs)
        await server.start()
        try:
            return await scenario(server, app)
        finally:
            app.release.set()
            await server.stop(2.0)

    return run(main())


async def _call(port: int, path: str, body: bytes = b"x", headers: list[tuple[bytes, bytes]] = GRPC_HEADERS) -> Answer:
    def call() -> Answer:
        client = RawConnection(port)
        try:
            return client.wait(client.call(path, body, headers).stream_id)
        finally:
            client.close()

    return await asyncio.get_running_loop().run_in_executor(None, call)


def test_asgi_answers_trailers_only_to_clients_that_take_them_and_a_failed_app_gets_500() -> None:
    async def scenario(server: H2Server, app: App) -> list[Answer]:
        no_te = [(b"content-type", b"application/grpc")]
        return [await _call(server.port, "/echo", b"hello"), await _call(server.port, "/echo", b"hi", no_te),
                await _call(server.port, "/boom")]  # fmt: skip

    echo, no_te, boom = _serve(scenario)
    assert (echo.status, echo.body, echo.trailers) == (200, b"hello", {b"grpc-status": b"0"})
    assert b"connection" not in echo.headers  # forbidden in HTTP/2: dropped
    assert (no_te.status, no_te.body, no_te.trailers) == (200, b"hi", {})
    assert (boom.status, boom.body) == (500, b"Internal Server Error")


def test_a_stream_whose_client_grants_no_window_parks_its_bytes_and_is_reset() -> None:
    """What the gRPC reply's stall bound uses: ``send.__self__.pending_bytes`` and ``abort_stream``."""

    async def scenario(server: H2Server, app: App) -> tuple[Answer, dict[str, Any]]:
        return await _call(server.port, "/park"), app.seen

    parked, seen = _serve(scenario)
    assert parked.reset and len(parked.body) <= 65_535  # the client's initial window, no more
    assert seen["parked"] >= 20 * len(CHUNK) - 65_535 and seen["disconnected"]


def test_an_idle_connection_is_closed_after_keep_alive_but_not_while_a_call_runs() -> None:
    async def scenario(server: H2Server, app: App) -> tuple[bool, Answer, bool]:
        loop = asyncio.get_running_loop()
        client = RawConnection(server.port)
        slow = client.call("/slow", b"x")
        await asyncio.sleep(1.5)  # three keep-alive periods with a call in flight
        open_while_busy = len(server.connections()) == 1
        app.release.set()
        answer = await loop.run_in_executor(None, client.wait, slow.stream_id)
        deadline = time.monotonic() + 20
        while server.connections() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        closed = not server.connections()
        client.close()
        return open_while_busy, answer, closed

    open_while_busy, answer, closed = _serve(scenario, keep_alive_secs=0.5)
    assert open_while_busy and answer.status == 200 and answer.trailers == {b"grpc-status": b"0"}
    assert closed, "an idle connection outlived its keep-alive"


def test_shutdown_finishes_calls_in_flight_and_refuses_new_streams() -> None:
    async def scenario(server: H2Server, app: App) -> tuple[Answer, Answer, bool]:
        loop = asyncio.get_running_loop()
        client = RawConnection(server.port)
        slow = client.call("/slow", b"x")
        while "slow" not in app.seen:
            await asyncio.sleep(0.01)
        stopping = loop.create_task(server.stop(10.0))
        await asyncio.sleep(0.2)
        late = client.call("/echo", b"late")
        late_answer = await loop.run_in_executor(None, client.wait, late.stream_id)
        app.release.set()
        answer = await loop.run_in_executor(None, client.wait, slow.stream_id)
        await stopping
        closed = await loop.run_in_executor(None, client.wait, 1 << 30)  # reads until the server closes
        client.close()
        return late_answer, answer, closed.status == 0 and client.closed

    late, answer, closed = _serve(scenario)
    assert (late.status, late.body) == (503, b"Service Unavailable")
    assert (answer.status, answer.body, answer.trailers) == (200, b"x", {b"grpc-status": b"0"})
    assert closed
