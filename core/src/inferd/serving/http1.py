"""An ASGI app served on the server's own event loop, for the HTTP and metrics frontends.

uvicorn with the httptools parser: measured here about twice the requests per second of
hypercorn on the same app (see the closing note of the plugin-host issue). The server runs on
the loop inferd already owns; inferd handles signals itself, so uvicorn's are never installed.
That loop is uvloop's when uvloop is installed (a core dependency on Linux): :func:`~inferd.serving.runner.run`.
Start and stop are :class:`~inferd.serving.runner.Runner`'s, shared with the HTTP/2 server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, ClassVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.contracts.errors import InvalidArgument
from inferd.serving.runner import Runner
from inferd.serving.writes import HeldWrites

if TYPE_CHECKING:
    from inferd.serving.direct import DirectRoutes, Handler
    from inferd.serving.tls import TlsConfig

log = logging.getLogger(__name__)

#: ``--http-max-input-size``'s default: 64 MiB, as Triton's (``HTTP_DEFAULT_MAX_INPUT_SIZE``).
HTTP_MAX_INPUT_SIZE = 1 << 26
#: ``--http-max-header-size``'s default: a request's line and headers, 100 KiB (Triton resets a
#: connection whose headers pass about 100 KB).
HTTP_MAX_HEADER_SIZE = 100 * 1024
#: ``--http-header-timeout-secs``'s default: how long a request's head may take to arrive, and a
#: request's body may go without a byte.
HTTP_HEADER_TIMEOUT = 60.0
#: The refusal's sentence (Triton's, which says "Request JSON size"); ``size`` says how it was measured.
TOO_LARGE = (
    "Request body size{size} exceeds the maximum allowed value of {limit} bytes. "
    "Use --http-max-input-size to increase the limit."
)


class BodyTooLarge(InvalidArgument):
    """A chunked request body grew past the limit while it was read (an InferdError, so a route
    that catches it answers a client error without logging a traceback; the refusal replaces it)."""


class BodyLimit:
    """Refuses an HTTP request whose body is larger than ``limit`` bytes, before reading it.

    A ``Content-Length`` over the limit is answered at once (400, Triton's answer, and the
    connection closes), with nothing of the body read; a body without one (chunked) is counted
    as it streams and refused when it passes the limit. uvicorn stops reading a connection while
    a request holds more than 64 KiB the application has not taken, so a refused body is never
    held in memory.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self._digits = len(str(limit))

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The app's own coroutine when the body is within the limit (no frame is added to the
        request's path), else the refusal, or the app reading a counted body."""
        if scope["type"] == "http":
            scope["inferd.max_input_size"] = self.limit  # what a compressed body may inflate to
            for name, value in scope["headers"]:
                if name == b"content-length":
                    if len(value) >= self._digits and int(value) > self.limit:  # fewer digits: within
                        return self._refuse(send, f" of {int(value)} bytes")
                    break
            else:
                if scope["method"] not in ("GET", "HEAD"):
                    return self._counted(scope, receive, send)
        return self.app(scope, receive, send)

    async def _counted(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app on a body without Content-Length, counting what it reads."""
        received = 0
        over = False

        async def counting() -> Message:
            nonlocal received, over
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                over = True
                raise BodyTooLarge(TOO_LARGE.format(size=" (chunked)", limit=self.limit))
            return message

        async def guarded(message: Message) -> None:
            if not over:  # whatever the app answers to the error, the refusal goes out instead
                await send(message)

        try:
            await self.app(scope, counting, guarded)
        except Exception:
            if not over:
                raise
        if over:
            await self._refuse(send, f" (more than {self.limit} bytes, chunked)")

    async def _refuse(self, send: Send, size: str) -> None:
        body = json.dumps({"error": TOO_LARGE.format(size=size, limit=self.limit)}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]  # fmt: skip
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_IDLE, _HEAD, _BODY = 0, 1, 2
_HEAD_END = b"\r\n\r\n"
_TOO_LARGE_HEAD = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
)


def _protocol_class(direct: DirectRoutes | None = None, max_header_bytes: int = HTTP_MAX_HEADER_SIZE,
                    header_timeout: float = HTTP_HEADER_TIMEOUT) -> type[asyncio.Protocol]:  # fmt: skip
    """uvicorn's httptools protocol (httptools is a core dependency) writing through
    :class:`HeldWrites`, answering ``direct``'s requests itself (:mod:`inferd.serving.direct`), with
    the limits on a request's head (``max_header_bytes``, ``header_timeout``)."""
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from inferd.serving.direct import DirectCycle, takes_directly
    from inferd.serving.flow import ReadingFlow

    class Protocol(HttpToolsProtocol):
        """One send per response: the transport holds writes until the response is complete.

        Slow or oversized requests are cut off: a head (request line and headers) over
        ``max_header_bytes`` is answered 431 and the connection closed; a head that takes longer
        than ``header_timeout`` to arrive (the first one counted from the connection's opening),
        or a body that goes that long without a byte while the server reads it, closes the
        connection. A request that arrives in one read (nearly all) costs two flag stores.
        """

        #: Set by :meth:`AsgiServer.drain`: every response from now on closes its connection.
        draining: ClassVar[bool] = False
        _state = _IDLE
        #: When the head being read began to arrive (a head that spans reads), or the body last grew.
        _since = 0.0
        _head_bytes = 0
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeldWrites(transport))  # type: ignore[arg-type]
            self.flow = ReadingFlow(self.transport, self.pipeline)
            self._state = _HEAD  # the first request's head is awaited from now
            self._since = self.loop.time()
            self._timer = self.loop.call_later(header_timeout, self._read_check)

        def data_received(self, data: bytes) -> None:
            if self._state == _HEAD and self._head_bytes:  # a head that began in an earlier read
                end = data.find(_HEAD_END)
                self._head_bytes += len(data) if end < 0 else end + 4
                if self._head_bytes > max_header_bytes:
                    self._refuse_head()
                    return
            super().data_received(data)
            if self._state != _IDLE and not self.transport.is_closing():
                self._read_incomplete(data)

        def _read_incomplete(self, data: bytes) -> None:
            """A read ended inside a request: count its head, watch the clock."""
            if self._state == _BODY:
                self._since = self.loop.time()
            elif not self._head_bytes:  # the head began in this read: its bytes follow the last head's end
                end = data.rfind(_HEAD_END)
                self._head_bytes = len(data) - (end + 4 if end >= 0 else 0) or 1
                if self._head_bytes > max_header_bytes:
                    self._refuse_head()
                    return
                self._since = self.loop.time()
            if self._timer is None:
                self._timer = self.loop.call_later(header_timeout, self._read_check)

        def _read_check(self) -> None:
            """The timer: close a connection whose head is late, or whose body stalled."""
            self._timer = None
            if self._state == _IDLE or self.transport.is_closing():
                return
            wait = self._since + header_timeout - self.loop.time()
            if self._state == _BODY and self.flow.read_paused:  # the server is not reading: not late
                self._since = self.loop.time()
                wait = header_timeout
            if wait <= 0:
                log.debug("%s: closed a connection whose request did not arrive within %g s",
                         self.client, header_timeout)  # fmt: skip
                self.transport.close()
                return
            self._timer = self.loop.call_later(wait, self._read_check)

        def _refuse_head(self) -> None:
            message = b"request line and headers exceed %d bytes (--http-max-header-size)" % max_header_bytes
            self._state = _IDLE
            if self.cycle is None or self.cycle.response_complete:  # else an answer is still due: just close
                self.transport.write(_TOO_LARGE_HEAD % (len(message), message))
            self.transport.close()

        def on_message_begin(self) -> None:
            self._state = _HEAD
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._state = _BODY
            super().on_headers_complete()
            if self.draining:
                self.cycle.keep_alive = False

        def on_message_complete(self) -> None:
            self._state = _IDLE
            self._head_bytes = 0
            super().on_message_complete()

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]
            super().on_response_complete()

        def drain(self) -> None:
            """Readiness turned false: the request in flight, and any queued, close the connection."""
            if self.cycle is not None:
                self.cycle.keep_alive = False
            for cycle, _app in self.pipeline:
                cycle.keep_alive = False

        def connection_lost(self, exc: Exception | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

    if direct is None:
        return Protocol
    routes = direct

    class DirectProtocol(Protocol):
        """Hands the requests ``direct`` takes to a :class:`DirectCycle`, the others to ASGI."""

        def on_headers_complete(self) -> None:
            parser = self.parser
            if parser.get_method() == b"POST" and self.limit_concurrency is None and not parser.should_upgrade():
                handler = self._direct_handler(httptools.parse_url(self.url).path)
                if handler is not None:
                    self._state = _BODY
                    keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive() and not self.draining
                    self._begin(DirectCycle(self, handler, self.headers, keep_alive))  # type: ignore[arg-type]
                    return
            super().on_headers_complete()

        def _direct_handler(self, raw_path: bytes) -> Handler | None:
            if b"%" in raw_path or not raw_path.isascii():  # an encoded path: ASGI decodes it
                return None
            handler = routes.handler(b"POST", raw_path.decode("ascii"))
            if handler is None or not takes_directly(self.headers, routes.max_body):
                return None
            return handler

        def _begin(self, cycle: DirectCycle) -> None:
            """Start ``cycle`` now, or after the response before it (pipelining), as uvicorn does."""
            existing = self.cycle
            self.cycle = cycle  # type: ignore[assignment]
            if existing is None or existing.response_complete:
                self._start_asgi_task(cycle, self.app)  # type: ignore[arg-type]
            else:
                self.flow.pause_reading()
                self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if type(cycle) is DirectCycle:
                cycle.add_body(body)
            else:
                super().on_body(body)

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if type(cycle) is DirectCycle:
                self._state = _IDLE
                self._head_bytes = 0
                cycle.end_body()
            else:
                super().on_message_complete()

        # The keep-alive timeout, without a timer per request: uvicorn arms one when a response
        # completes and cancels it when data arrives (~1.6 us a request on uvloop). Here one timer
        # stays armed while the connection lives and, when it fires, closes the connection only
        # if it has been idle for the whole timeout; otherwise it waits for what is left.
        _idle_since: float | None = None

        def _unset_keepalive_if_required(self) -> None:  # uvicorn calls it when data arrives
            self._idle_since = None

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                # read again once no request waits (ReadingFlow): the one started now may have body
                # unread, and a DirectCycle (unlike uvicorn's receive()) does not resume reading itself
                self.flow.resume_reading()
                self._start_asgi_task(cycle, app)
                return
            self.flow.resume_reading()
            self._idle_since = self.loop.time()
            if self.timeout_keep_alive_task is None:
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_check)

        def _keep_alive_check(self) -> None:
            self.timeout_keep_alive_task = None
            if self.transport.is_closing():
                return
            idle_since = self._idle_since
            wait: float = self.timeout_keep_alive  # busy with a request: look again a whole timeout later
            if idle_since is not None:
                wait -= self.loop.time() - idle_since
                if wait <= 0:
                    self.transport.close()
                    return
            self.timeout_keep_alive_task = self.loop.call_later(wait, self._keep_alive_check)

        def connection_lost(self, exc: Exception | None) -> None:
            task = self.timeout_keep_alive_task
            if task is not None:  # a closed connection is not kept alive by its timer
                task.cancel()
                self.timeout_keep_alive_task = None
            super().connection_lost(exc)

    return DirectProtocol


class AsgiServer(Runner):
    """Serves ``app`` on ``host:port`` until :meth:`stop`; over TLS with ``tls`` (see :mod:`inferd.serving.tls`)."""

    def __init__(self, app: Any, host: str, port: int, what: str, reuse_port: bool = False,
                 tls: TlsConfig | None = None, direct: DirectRoutes | None = None,
                 keep_alive_secs: float = 75.0, max_header_bytes: int = HTTP_MAX_HEADER_SIZE,
                 header_timeout: float = HTTP_HEADER_TIMEOUT) -> None:  # fmt: skip
        super().__init__(app, host, port, what, reuse_port, tls, keep_alive_secs)
        #: Requests answered beside the app, without ASGI (:mod:`inferd.serving.direct`).
        self.direct = direct
        #: The largest request head (``--http-max-header-size``), and how long it, or a pause in a
        #: body, may take (``--http-header-timeout-secs``).
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout

    def protocol(self) -> type[asyncio.Protocol]:
        return _protocol_class(self.direct, self.max_header_bytes, self.header_timeout)

    def drain(self) -> None:
        """Readiness turned false (``--drain-delay-secs``): keep serving, but every response from
        now on says ``Connection: close`` and closes its connection, so that no keep-alive
        connection is left idle when the listener closes (where a request sent as it closes
        would be reset)."""
        if self._protocol is None or self._server is None:
            return
        self._protocol.draining = True  # type: ignore[attr-defined]
        for connection in self.connections():
            connection.drain()
