"""Start and stop of inferd's servers, HTTP/1.1 and HTTP/2 alike, on the server's own loop.

:class:`Runner` binds the socket itself (a port in use is a clear start-up error; ``--workers N``
share a port with SO_REUSEPORT) and serves it with asyncio's ``loop.create_server``, building one
protocol of the subclass's class per connection (:class:`~inferd.serving.h1.H1Protocol`,
:class:`~inferd.serving.h2.GrpcH2Protocol`); inferd handles signals itself. :meth:`Runner.stop` is
a graceful shutdown: the listener closes, each connection is asked to close once its requests are
answered, and requests in flight finish for up to the grace period (over TLS without waiting on
idle clients).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from inferd.contracts.errors import StartupError
from inferd.serving.tls import CertificateWatch, TlsConfig, forget, listening_context

if TYPE_CHECKING:
    from inferd.serving.h2_stream import UnaryRoute

log = logging.getLogger(__name__)

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop's event loop when uvloop is installed, asyncio's otherwise.

    uvloop answers a null ASGI handler ~20% faster than asyncio here (benchmarks/vs_triton.py's null stacks).
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


class ServerState:
    """What one server's connections share: themselves, their requests' tasks, a count of answers.

    A protocol is built with it (keyword ``server_state``) and adds itself to :attr:`connections`
    while its connection is open, and each request's task to :attr:`tasks` while it runs: the
    graceful shutdown waits for both.
    """

    __slots__ = ("connections", "tasks", "total_requests")

    def __init__(self) -> None:
        self.connections: set[Any] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.total_requests = 0


async def _drop_closed(state: ServerState) -> None:
    """Over TLS: abort each connection closed whose data is sent, not waiting for the peer's close_notify.

    asyncio keeps a TLS connection it closed open until the client answers with its own
    close_notify, for up to 30 s: an idle keep-alive client that never answers would hold the
    shutdown that long. close_notify was sent; TLS does not require waiting for the answer.
    """
    while True:
        await asyncio.sleep(0.1)
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None and transport.is_closing() and not transport.get_write_buffer_size():
                transport.abort()


async def _settled(state: ServerState) -> None:
    """Return once every connection has closed and every request's task has ended."""
    while state.connections:
        await asyncio.sleep(0.1)
    while state.tasks:
        await asyncio.sleep(0.1)


class Runner:
    """One server on a socket of its own: :meth:`start`, then :meth:`stop`.

    A subclass names the protocol class that serves a connection (:meth:`protocol`: built with the
    keywords ``server_state`` and ``_loop``, it has a ``shutdown()`` that closes its connection
    once its requests are answered) and the ALPN names a TLS listener offers (:attr:`alpn`).
    """

    alpn: ClassVar[list[str]] = ["http/1.1"]

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        what: str,
        reuse_port: bool = False,
        tls: TlsConfig | None = None,
        keep_alive_secs: float = 75.0,
    ) -> None:
        self.app = app
        #: How long an idle keep-alive connection stays open.
        self.keep_alive_secs = keep_alive_secs
        self.reuse_port = reuse_port
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self._server: asyncio.Server | None = None
        self._state = ServerState()
        self._sock: socket.socket | None = None
        self._watch: CertificateWatch[ssl.SSLContext] | None = None
        #: The class :meth:`protocol` built at :meth:`start`.
        self._protocol: type[asyncio.Protocol] | None = None

    def protocol(self) -> type[asyncio.BaseProtocol]:
        """The protocol class that serves one connection."""
        raise NotImplementedError

    async def start(self) -> None:
        """Bind and accept connections; returns once the socket is listening."""
        protocol: Any = self.protocol()
        self._protocol = protocol
        context = None
        if self.tls is not None:
            context, self._watch = listening_context(self.tls, self.alpn, self.what)
        self._sock = bind(self.host, self.port, self.what, reuse_port=self.reuse_port)
        self.port = self._sock.getsockname()[1]
        loop = asyncio.get_running_loop()
        state = self._state = ServerState()
        self._server = await loop.create_server(
            lambda: protocol(server_state=state, _loop=loop), sock=self._sock, ssl=context, backlog=2048
        )

    def connections(self) -> list[Any]:
        """The connections open now (instances of the protocol class); none before start or after stop."""
        return [] if self._server is None else list(self._state.connections)

    async def stop(self, grace: float) -> None:
        """Stop accepting; let requests in flight finish for up to ``grace`` seconds, then end them."""
        if self._watch is not None:
            forget(self._watch)
        server = self._server
        if server is None:
            return
        self._server = None  # a second stop has nothing to do
        state = self._state
        sweeper = asyncio.get_running_loop().create_task(_drop_closed(state)) if self.tls is not None else None
        try:
            server.close()
            if self._sock is not None:
                self._sock.close()
            for connection in list(state.connections):
                connection.shutdown()
            try:
                await asyncio.wait_for(_settled(state), grace)
            except TimeoutError:
                log.warning(
                    "%s: %d request(s) still running after the %g s grace; cancelled",
                    self.what,
                    len(state.tasks),
                    grace,
                )
                for task in list(state.tasks):
                    task.cancel()
                if state.tasks:  # a cancelled request may still answer (a direct route's 500)
                    await asyncio.wait(list(state.tasks), timeout=1.0)
                for connection in list(state.connections):  # what is left waits on a peer that does not read
                    if not connection.transport.is_closing():
                        connection.transport.abort()
        except Exception:  # a failed close must not stop the rest of the shutdown
            log.exception("%s did not shut down cleanly", self.what)
        finally:
            if sweeper is not None:
                sweeper.cancel()


class H2Server(Runner):
    """Serves ``app`` over HTTP/2 (prior knowledge, or ALPN ``h2`` over TLS) until :meth:`stop`;
    the requests ``unary`` routes by raw path skip ASGI (see :mod:`inferd.serving.h2_stream`)."""

    alpn: ClassVar[list[str]] = ["h2"]

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        what: str,
        unary: Mapping[bytes, UnaryRoute] | None = None,
        reuse_port: bool = False,
        tls: TlsConfig | None = None,
        keep_alive_secs: float = 75.0,
    ) -> None:
        super().__init__(app, host, port, what, reuse_port, tls, keep_alive_secs)
        #: The requests answered without ASGI, by raw path.
        self.unary = unary

    def protocol(self) -> type[asyncio.BaseProtocol]:
        try:
            import zttp  # noqa: F401
        except ImportError:
            raise StartupError("--grpc-transport h2 needs the zttp package (pip install zttp)") from None
        from inferd.serving.h2 import protocol_class

        return protocol_class(self.app, self.unary, self.keep_alive_secs)
