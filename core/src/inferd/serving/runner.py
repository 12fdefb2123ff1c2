"""Start and stop of inferd's uvicorn servers, HTTP/1.1 and HTTP/2 alike, on the server's own loop.

:class:`Runner` binds the socket itself (a port in use is a clear start-up error; ``--workers N``
share a port with SO_REUSEPORT), builds ``uvicorn.Config`` with the protocol class of the subclass,
and starts uvicorn's ``Server`` the way its private ``_serve`` does, without its signal handlers:
inferd handles signals itself. :meth:`Runner.stop` is uvicorn's graceful shutdown (requests in
flight finish for up to the grace period), over TLS without waiting on idle clients.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from inferd.contracts.errors import StartupError
from inferd.serving.tls import CertificateWatch, TlsConfig, forget, listening_context

if TYPE_CHECKING:
    from inferd.serving.h2_stream import UnaryRoute

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        raise StartupError(f"{what} cannot bind {host}:{port}: {exc.strerror}") from None
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


class Runner:
    """One uvicorn server on a socket of its own: :meth:`start`, then :meth:`stop`.

    A subclass names the protocol class that serves a connection (:meth:`protocol`) and the ALPN
    names a TLS listener offers (:attr:`alpn`).
    """

    alpn: ClassVar[list[str]] = ["http/1.1"]

    def __init__(self, app: Any, host: str, port: int, what: str, reuse_port: bool = False,
                 tls: TlsConfig | None = None, keep_alive_secs: float = 75.0) -> None:  # fmt: skip
        self.app = app
        #: How long an idle keep-alive connection stays open.
        self.keep_alive_secs = keep_alive_secs
        self.reuse_port = reuse_port
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self._server: Any = None
        self._tick: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None
        self._watch: CertificateWatch[ssl.SSLContext] | None = None
        #: The class :meth:`protocol` built at :meth:`start`.
        self._protocol: type[asyncio.Protocol] | None = None

    def protocol(self) -> type[asyncio.Protocol]:
        """The uvicorn protocol class that serves one connection."""
        raise NotImplementedError

    async def start(self) -> None:
        """Bind and accept connections; returns once the socket is listening."""
        import uvicorn

        http = self._protocol = self.protocol()
        context = None
        if self.tls is not None:
            context, self._watch = listening_context(self.tls, self.alpn, self.what)
        self._sock = bind(self.host, self.port, self.what, reuse_port=self.reuse_port)
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, http=http, interface="asgi3", lifespan="off", log_config=None, access_log=False, proxy_headers=False,
            timeout_keep_alive=self.keep_alive_secs,  # type: ignore[arg-type]  # typed int; call_later takes a float
            server_header=False, date_header=False, ssl_context_factory=tls_factory(context), ws="none",
        )  # fmt: skip
        server = uvicorn.Server(config)
        config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[self._sock])
        self._server = server
        # uvicorn's main loop only watches ``should_exit``; run it so its housekeeping continues.
        self._tick = asyncio.get_running_loop().create_task(server.main_loop(), name=f"inferd-{self.what}")

    def connections(self) -> list[Any]:
        """The connections open now (instances of the protocol class); none before start or after stop."""
        server = self._server
        return [] if server is None else list(server.server_state.connections)

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


class H2Server(Runner):
    """Serves ``app`` over HTTP/2 (prior knowledge, or ALPN ``h2`` over TLS) until :meth:`stop`;
    the requests ``unary`` routes by raw path skip ASGI (see :mod:`inferd.serving.h2_stream`)."""

    alpn: ClassVar[list[str]] = ["h2"]

    def __init__(self, app: Any, host: str, port: int, what: str, unary: Mapping[bytes, UnaryRoute] | None = None,
                 reuse_port: bool = False, tls: TlsConfig | None = None, keep_alive_secs: float = 75.0) -> None:  # fmt: skip
        super().__init__(app, host, port, what, reuse_port, tls, keep_alive_secs)
        #: The requests answered without ASGI, by raw path.
        self.unary = unary

    def protocol(self) -> type[asyncio.Protocol]:
        try:
            import zttp  # noqa: F401
        except ImportError:
            raise StartupError("--grpc-transport h2 needs the zttp package (pip install zttp)") from None
        from inferd.serving.h2 import protocol_class

        return protocol_class(self.app, self.unary, self.keep_alive_secs)
