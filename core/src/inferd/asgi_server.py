"""An ASGI app served on the server's own event loop, for the HTTP and metrics frontends.

uvicorn with the httptools parser: measured here about twice the requests per second of
hypercorn on the same app (see the closing note of the plugin-host issue). The server runs on
the loop inferd already owns; inferd handles signals itself, so uvicorn's are never installed.
That loop is uvloop's when uvloop is installed (a core dependency on Linux): :func:`run`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inferd.errors import InvalidArgument
from inferd.tls import CertificateWatch, TlsConfig, forget, listening_context

if TYPE_CHECKING:
    from inferd.asgi_direct import DirectRoutes, Handler

log = logging.getLogger(__name__)

T = TypeVar("T")

#: ``--http-max-input-size``'s default: 64 MiB, as Triton's (``HTTP_DEFAULT_MAX_INPUT_SIZE``).
HTTP_MAX_INPUT_SIZE = 1 << 26
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


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop's event loop when uvloop is installed, asyncio's otherwise.

    uvloop answers a null ASGI handler ~20% faster than asyncio here (issue 9's measurements).
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - depends on the platform
        return asyncio.run(main)
    return uvloop.run(main)


def bind(host: str, port: int, what: str, backlog: int = 2048, reuse_port: bool = False) -> socket.socket:
    """A listening TCP socket; a port in use is a clear start-up error naming ``what``.

    ``reuse_port``: SO_REUSEPORT, for the workers of ``--workers N`` sharing one port.
    """
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it a response written as head + body waits ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: {what} cannot bind {host}:{port}: {exc.strerror}") from None
    sock.listen(backlog)
    return sock


def tls_factory(context: ssl.SSLContext | None) -> Callable[[Any, Any], ssl.SSLContext] | None:
    """uvicorn's ``ssl_context_factory`` serving ``context`` as it is (``None``: clear text)."""
    if context is None:
        return None
    return lambda _config, _default: context


async def shutdown(server: Any, sockets: list[socket.socket], tls: bool) -> None:
    """uvicorn's graceful ``server.shutdown``; over TLS, without waiting on idle clients.

    asyncio keeps a TLS connection it closed open until the client answers with its own
    close_notify, for up to 30 s, and uvicorn waits for every connection: an idle keep-alive client
    that never answers would hold the shutdown that long. A closed connection whose data is sent
    is dropped instead (close_notify was sent; TLS does not require waiting for the answer).
    """
    sweeper = asyncio.get_running_loop().create_task(_drop_closed(server)) if tls else None
    try:
        await server.shutdown(sockets=sockets)
    finally:
        if sweeper is not None:
            sweeper.cancel()


async def _drop_closed(server: Any) -> None:
    while True:
        await asyncio.sleep(0.1)
        for connection in list(server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and transport.is_closing() and not transport.get_write_buffer_size():
                transport.abort()


class HeldWrites:
    """A connection's transport whose writes are held and sent together, in one ``writelines``.

    uvicorn writes a response's head, and each body message, with its own ``transport.write``:
    one ``send`` system call each. :class:`Protocol` flushes when the response is complete; a
    flush scheduled with the first held write sends whatever else (``100 Continue``, a streamed
    response's chunks) by the next turn of the loop.
    """

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: list[bytes | memoryview] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | memoryview) -> None:
        held = self._held
        held.append(data)
        if len(held) == 1:
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send what is held (dropped once the connection is closing, as a closed transport would)."""
        held = self._held
        if not held:
            return
        self._held = []
        transport = self._transport
        if transport.is_closing():
            return
        if len(held) == 1:
            transport.write(held[0])
        else:
            transport.writelines(held)

    def writelines(self, data: list[bytes | memoryview]) -> None:
        """Send ``data`` now, after anything held, in one call (a whole response)."""
        held = self._held
        if held:
            self._held = []
            data = [*held, *data]
        if not self._transport.is_closing():
            self._transport.writelines(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _protocol_class(direct: DirectRoutes | None = None) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (httptools is a core dependency) writing through
    :class:`HeldWrites`, answering ``direct``'s requests itself (:mod:`inferd.asgi_direct`)."""
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from inferd.asgi_direct import DirectCycle, takes_directly

    class Protocol(HttpToolsProtocol):
        """One send per response: the transport holds writes until the response is complete."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeldWrites(transport))  # type: ignore[arg-type]

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]
            super().on_response_complete()

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
                    keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
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
            self.flow.resume_reading()
            if self.pipeline:
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
                return
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


class AsgiServer:
    """Serves ``app`` on ``host:port`` until :meth:`stop`; over TLS with ``tls`` (see :mod:`inferd.tls`)."""

    def __init__(self, app: Any, host: str, port: int, what: str, reuse_port: bool = False,
                 tls: TlsConfig | None = None, direct: DirectRoutes | None = None,
                 keep_alive_secs: float = 75.0) -> None:  # fmt: skip
        self.app = app
        #: How long an idle keep-alive connection stays open.
        self.keep_alive_secs = keep_alive_secs
        #: Requests answered beside the app, without ASGI (:mod:`inferd.asgi_direct`).
        self.direct = direct
        self.reuse_port = reuse_port
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self._server: Any = None
        self._tick: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None
        self._watch: CertificateWatch[ssl.SSLContext] | None = None

    async def start(self) -> None:
        """Bind and accept connections; returns once the socket is listening."""
        import uvicorn

        http = _protocol_class(self.direct)
        context = None
        if self.tls is not None:
            context, self._watch = listening_context(self.tls, ["http/1.1"], self.what)
        self._sock = bind(self.host, self.port, self.what, reuse_port=self.reuse_port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, http=http, interface="asgi3", lifespan="off", log_config=None, access_log=False, proxy_headers=False,
            timeout_keep_alive=self.keep_alive_secs,  # type: ignore[arg-type]  # typed int; call_later takes a float
            server_header=False, date_header=False, ssl_context_factory=tls_factory(context),
        )  # fmt: skip
        server = uvicorn.Server(config)
        config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[self._sock])
        self._server = server
        # uvicorn's main loop only watches ``should_exit``; run it so its housekeeping continues.
        self._tick = asyncio.get_running_loop().create_task(server.main_loop(), name=f"inferd-{self.what}")

    async def stop(self, grace: float) -> None:
        """Stop accepting; let requests in flight finish for up to ``grace`` seconds."""
        if self._watch is not None:
            forget(self._watch)
        server = self._server
        if server is None:
            return
        self._server = None  # a second stop has nothing to do
        server.should_exit = True
        server.config.timeout_graceful_shutdown = grace
        if self._tick is not None:
            await self._tick
        try:
            await shutdown(server, [self._sock] if self._sock else [], self.tls is not None)
        except Exception:  # a failed close must not stop the rest of the shutdown
            log.exception("%s did not shut down cleanly", self.what)
