"""The gRPC frontend (KServe v2 + Triton extensions), served by grpc.aio on the server's loop."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Any

from inferd.frontend import Frontend
from inferd.hookspecs import FrontendRegister, hookimpl

if TYPE_CHECKING:
    import grpc

    from inferd.dataplane import DataPlane
    from inferd.default_plugins.grpc.service import InferenceService
    from inferd.hookspecs import ServerSettings

log = logging.getLogger(__name__)

#: Channel options, as Triton's gRPC server sets them: messages up to 2 GiB - 1 (large tensors),
#: no port sharing, and Triton's keepalive defaults.
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", 7_200_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
    ("grpc.http2.max_ping_strikes", 2),
]


class GrpcFrontend(Frontend):
    """``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on ``host:port``."""

    name = "gRPC"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._server: grpc.aio.Server | None = None
        self._service: InferenceService | None = None

    def _bind_address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    async def start(self, dataplane: DataPlane) -> None:
        import grpc

        from inferd.default_plugins.grpc.service import InferenceService, build_handlers

        self._service = InferenceService(dataplane)
        reuse = int(dataplane.shares_ports)  # --workers N: the workers share the port
        server = grpc.aio.server(options=[(k, reuse if k == "grpc.so_reuseport" else v) for k, v in SERVER_OPTIONS])
        server.add_generic_rpc_handlers(build_handlers(self._service))
        address = self._bind_address()
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            port, reason = 0, str(exc)
        else:
            reason = "the address is in use or not available"
        if port == 0:
            raise SystemExit(
                f"error: gRPC frontend cannot bind {address}: {_bind_error(self.host, self.port) or reason}"
            )
        self.port = port
        await server.start()
        self._server = server

    async def stop(self, grace: float) -> None:
        if self._server is not None:
            if self._service is not None:
                self._service.close()
            await self._server.stop(grace)
            self._server = None

    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _bind_error(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, in the OS's words (gRPC's own error does not say)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host.strip("[]"), port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def _factory(options: ServerSettings) -> GrpcFrontend | None:
    if not options.allow_grpc:
        return None
    return GrpcFrontend(options.host, options.grpc_port)


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("grpc", _factory)
