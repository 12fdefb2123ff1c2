"""The ``h2`` transport: :class:`GrpcApp` on uvicorn's HTTP/2 protocol (the zttp parser).

It runs on the server's own loop, as the HTTP frontend's uvicorn does. Shutdown is graceful:
new streams are refused (HTTP 503, which gRPC clients read as UNAVAILABLE), calls in flight
finish for up to the grace period, then each connection gets GOAWAY and closes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from inferd.asgi_server import bind, shutdown, tls_factory
from inferd.default_plugins.grpc.h2_app import GrpcApp
from inferd.default_plugins.grpc.service import InferenceService
from inferd.tls import CertificateWatch, TlsConfig, forget, listening_context

log = logging.getLogger(__name__)

#: Idle connections are closed (GOAWAY) after this long: Triton's gRPC keepalive time, 2 h.
IDLE_SECONDS = 7200


class H2Transport:
    """Serves an :class:`InferenceService` over HTTP/2 until :meth:`stop` (over TLS with ``tls``,
    offering ALPN ``h2`` as gRPC clients require)."""

    def __init__(self, max_message_bytes: int, reuse_port: bool = False, tls: TlsConfig | None = None) -> None:
        self.max_message_bytes = max_message_bytes
        self.reuse_port = reuse_port
        self.tls = tls
        self._watch: CertificateWatch[ssl.SSLContext] | None = None
        self._server: object | None = None
        self._tick: asyncio.Task[None] | None = None

    async def start(self, service: InferenceService, host: str, port: int) -> int:
        import uvicorn

        try:
            import zttp  # noqa: F401
        except ImportError:
            raise SystemExit("error: --grpc-transport h2 needs the zttp package (pip install zttp)") from None
        from inferd.default_plugins.grpc.h2_protocol import GrpcH2Protocol

        context = None
        if self.tls is not None:
            context, self._watch = listening_context(self.tls, GrpcH2Protocol.alpn_protocols, "gRPC frontend")
        sock = bind(host, port, "gRPC frontend", reuse_port=self.reuse_port)
        config = uvicorn.Config(
            GrpcApp(service, self.max_message_bytes), http=GrpcH2Protocol, interface="asgi3", lifespan="off",
            log_config=None, access_log=False, proxy_headers=False, timeout_keep_alive=IDLE_SECONDS,
            server_header=False, date_header=False, ssl_context_factory=tls_factory(context),
        )  # fmt: skip
        server = uvicorn.Server(config)
        config.load()
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        self._server, self._sock = server, sock
        # uvicorn's main loop only watches ``should_exit``; run it so its housekeeping continues.
        self._tick = asyncio.get_running_loop().create_task(server.main_loop(), name="inferd-grpc-h2")
        return int(sock.getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Stop accepting; let calls in flight finish for up to ``grace`` seconds."""
        import uvicorn

        if self._watch is not None:
            forget(self._watch)
        server = self._server
        if not isinstance(server, uvicorn.Server):
            return
        self._server = None
        server.should_exit = True
        server.config.timeout_graceful_shutdown = grace  # type: ignore[assignment]  # typed int; asyncio.timeout takes a float
        if self._tick is not None:
            await self._tick
        try:
            await shutdown(server, [self._sock], self.tls is not None)
        except Exception:  # a failed close must not stop the rest of the shutdown
            log.exception("the gRPC frontend did not shut down cleanly")
