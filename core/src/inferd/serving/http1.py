"""An ASGI app served over HTTP/1.1 on the server's own event loop, for the HTTP and metrics frontends.

The protocol is inferd's own over httptools' parser (:mod:`inferd.serving.h1`); the loop is the
one inferd already owns, uvloop's when uvloop is installed (a core dependency on Linux):
:func:`~inferd.serving.runner.run`. Start and stop are :class:`~inferd.serving.runner.Runner`'s,
shared with the HTTP/2 server. Here: :class:`AsgiServer`, the limits' defaults, and
:class:`BodyLimit`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.contracts.errors import InvalidArgument
from inferd.serving.runner import Runner

if TYPE_CHECKING:
    from inferd.serving.direct import DirectRoutes
    from inferd.serving.tls import TlsConfig

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
    as it streams and refused when it passes the limit. The protocol stops reading a connection
    while a request holds more than 64 KiB the application has not taken, so a refused body is
    never held in memory.
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
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class AsgiServer(Runner):
    """Serves ``app`` on ``host:port`` until :meth:`stop`; over TLS with ``tls`` (see :mod:`inferd.serving.tls`)."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        what: str,
        reuse_port: bool = False,
        tls: TlsConfig | None = None,
        direct: DirectRoutes | None = None,
        keep_alive_secs: float = 75.0,
        max_header_bytes: int = HTTP_MAX_HEADER_SIZE,
        header_timeout: float = HTTP_HEADER_TIMEOUT,
    ) -> None:
        super().__init__(app, host, port, what, reuse_port, tls, keep_alive_secs)
        #: Requests answered beside the app, without ASGI (:mod:`inferd.serving.direct`).
        self.direct = direct
        #: The largest request head (``--http-max-header-size``), and how long it, or a pause in a
        #: body, may take (``--http-header-timeout-secs``).
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout

    def protocol(self) -> type[asyncio.Protocol]:
        from inferd.serving.h1 import Served, protocol_class  # imports httptools: not at the facade's import

        served = Served(self.app, self.direct, self.keep_alive_secs, self.max_header_bytes, self.header_timeout)
        return protocol_class(served)

    def drain(self) -> None:
        """Readiness turned false (``--drain-delay-secs``): keep serving, but every response from
        now on says ``Connection: close`` and closes its connection, so that no keep-alive
        connection is left idle when the listener closes (where a request sent as it closes
        would be reset)."""
        if self._protocol is None or self._server is None:
            return
        self._protocol.draining = True  # type: ignore[attr-defined]  # an H1Protocol class
        for connection in self.connections():
            connection.drain()
