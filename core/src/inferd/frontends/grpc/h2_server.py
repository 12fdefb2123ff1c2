"""The ``h2`` transport: :class:`GrpcApp` on inferd's HTTP/2 server (:mod:`inferd.serving`).

It runs on the server's own loop, as the HTTP frontend's server does. Shutdown is graceful:
new streams are refused (HTTP 503, which gRPC clients read as UNAVAILABLE), calls in flight
finish for up to the grace period, then each connection gets GOAWAY and closes.
"""

from __future__ import annotations

from inferd.frontends.grpc.h2_app import GrpcApp
from inferd.frontends.grpc.h2_unary import unary_routes
from inferd.frontends.grpc.service import InferenceService
from inferd.serving import H2Server
from inferd.serving.tls import TlsConfig

#: Idle connections are closed (GOAWAY) after this long: Triton's gRPC keepalive time, 2 h.
IDLE_SECONDS = 7200


class H2Transport:
    """Serves an :class:`InferenceService` over HTTP/2 until :meth:`stop` (over TLS with ``tls``,
    offering ALPN ``h2`` as gRPC clients require)."""

    def __init__(self, max_message_bytes: int, reuse_port: bool = False, tls: TlsConfig | None = None) -> None:
        self.max_message_bytes = max_message_bytes
        self.reuse_port = reuse_port
        self.tls = tls
        self._server: H2Server | None = None

    async def start(self, service: InferenceService, host: str, port: int) -> int:
        app = GrpcApp(service, self.max_message_bytes)
        server = H2Server(app, host, port, "gRPC frontend", unary_routes(app), self.reuse_port, self.tls, IDLE_SECONDS)
        self._server = server  # stopped even when the start fails half way (a certificate watch to forget)
        await server.start()
        return int(server.port)

    async def stop(self, grace: float) -> None:
        """Stop accepting; let calls in flight finish for up to ``grace`` seconds."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
