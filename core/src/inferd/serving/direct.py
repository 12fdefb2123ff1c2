"""Direct routes: HTTP/1.1 requests answered straight from inferd's protocol, without ASGI.

A frontend can give :class:`~inferd.serving.AsgiServer` a :class:`DirectRoutes` beside its ASGI
app. When a request's head is complete, the server's protocol asks it for a handler; a request it
takes (a POST with a ``Content-Length`` within the body limit, nothing unusual: see
:func:`takes_directly`) is read into one ``bytes`` and handed to the handler, whose :class:`Reply`
is written to the socket in one go. Everything else goes to the ASGI app
(:class:`~inferd.serving.h1_cycle.AsgiCycle`). A direct request skips what ASGI costs per request:
the scope, the receive/send messages, the header checks of ASGI's ``send``, a copy of the body
(measured with benchmarks/h1_protocol.py).

:class:`DirectCycle` is the ASGI cycle's sibling in the protocol's bookkeeping (keep-alive,
pipelining, flow control, disconnects, graceful shutdown): the same ``add_body``, ``end_body``,
``disconnect``, ``run``, ``keep_alive`` and ``response_complete``. The response bytes are those
the ASGI cycle writes for the same status and headers.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from inferd.serving.flow import ReadingFlow
    from inferd.serving.writes import HeldWrites

log = logging.getLogger("inferd.serving.h1")  # where the ASGI cycle logs an application's exception

Headers = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class Reply:
    """A whole HTTP response: status, headers (lower-case names; ``content-length`` among them)
    and the body's parts, written in order without being joined."""

    status: int
    headers: Headers
    parts: list[bytes | memoryview]


def _status_line(status: int, phrases: dict[int, str]) -> bytes:
    """The status line for ``status``: ``HTTP/1.1``, the code, the standard phrase (empty for a code without one)."""
    return b"".join([b"HTTP/1.1 ", str(status).encode(), b" ", phrases.get(status, "").encode(), b"\r\n"])


_PHRASES = {s.value: s.phrase for s in http.HTTPStatus}  # not HTTPStatus(n) per n: 440 ValueErrors at import
#: Every status's line.
STATUS_LINE = {status: _status_line(status, _PHRASES) for status in range(100, 600)}

#: A direct route's handler: the request's headers (lower-case names) and whole body -> its reply.
Handler = Callable[[Headers, bytes], Awaitable[Reply]]


class DirectRoutes(Protocol):
    """The requests a frontend answers directly (see the module's docstring)."""

    #: Bodies larger than this go to the ASGI app (which refuses them: the body limit).
    max_body: int

    def handler(self, method: bytes, path: str) -> Handler | None:
        """The handler for ``method`` on ``path`` (percent-decoded), or None: serve it over ASGI."""
        ...


class Connection(Protocol):
    """The parts of the HTTP/1.1 protocol a request (direct or ASGI) uses."""

    transport: HeldWrites
    flow: ReadingFlow
    loop: asyncio.AbstractEventLoop

    def on_response_complete(self) -> None: ...


def takes_directly(headers: Headers, max_body: int) -> bool:
    """Whether a request with ``headers`` can be answered directly: a ``Content-Length`` (one,
    within ``max_body``), no ``Transfer-Encoding`` and no ``Expect`` (both go the ASGI way)."""
    length: bytes | None = None
    for name, value in headers:
        if name == b"content-length":
            if length is not None:
                return False
            length = value
        elif name == b"transfer-encoding" or name == b"expect":
            return False
    return length is not None and length.isdigit() and int(length) <= max_body


class DirectCycle:
    """One request answered by a :data:`Handler`."""

    __slots__ = (
        "_conn",
        "_handler",
        "_headers",
        "_chunks",
        "_waiter",
        "_task",
        "keep_alive",
        "more_body",
        "disconnected",
        "response_complete",
    )

    def __init__(self, conn: Connection, handler: Handler, headers: Headers, keep_alive: bool) -> None:
        self._conn = conn
        self._handler = handler
        self._headers = headers
        self._chunks: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        #: The task running the handler, while it runs: a client that goes away cancels it.
        self._task: asyncio.Task[None] | None = None
        self.keep_alive = keep_alive  # the protocol's shutdown() and drain() set it False
        self.more_body = True
        self.disconnected = False
        self.response_complete = False

    # -- what the protocol calls ----------------------------------------------------------------

    def disconnect(self) -> None:
        """The client went away: a body wait ends, and a running handler is cancelled (the
        request leaves the model's queue, a Python model's ``is_cancelled()`` turns true, and its
        tenant's slot goes back at once)."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and (self.disconnected or not self.more_body):
            waiter.set_result(None)
        task = self._task
        if task is not None and self.disconnected:
            self._task = None
            task.cancel()

    def add_body(self, chunk: bytes) -> None:
        """A part of the body as the parser gives it (kept whole: the length is within the limit)."""
        self._chunks.append(chunk)

    def end_body(self) -> None:
        self.more_body = False
        self._wake()

    async def run(self, _app: object) -> None:
        """Wait for the whole body, call the handler, write its reply (the ASGI app is not used)."""
        try:
            if self.more_body and not self.disconnected:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
            if self.disconnected:
                return
            chunks = self._chunks
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self._chunks = []
            # the loop given: without it Python 3.11 asks for the running loop, which makes a getpid system call
            self._task = asyncio.current_task(self._conn.loop)
            reply = await self._handler(self._headers, body)
            self._task = None
        except BaseException as exc:
            if self.disconnected and isinstance(exc, asyncio.CancelledError):
                return  # the client went away: nothing to answer
            log.error("Exception in ASGI application\n", exc_info=exc)
            reply = Reply(500, _ERROR_HEADERS, [b"Internal Server Error"])
            self.keep_alive = False
        await self._write(reply)

    # -- the response ---------------------------------------------------------------------------

    async def _write(self, reply: Reply) -> None:
        conn = self._conn
        flow = conn.flow
        if flow.write_paused and not self.disconnected:
            await flow.drain()
        if self.disconnected:
            return
        head = [STATUS_LINE[reply.status]]
        says_close = False
        for name, value in reply.headers:
            head += (name, b": ", value, b"\r\n")
            if name == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
                self.keep_alive = False
                says_close = True
        if not self.keep_alive and not says_close:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        transport = conn.transport
        transport.writelines([b"".join(head), *reply.parts])  # one send for the whole response
        self.response_complete = True
        if not self.keep_alive:
            transport.close()
        conn.on_response_complete()


_ERROR_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]
