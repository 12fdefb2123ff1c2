"""The gRPC frontend (KServe v2 + Triton extensions) on the server's loop, over one of two transports.

``--grpc-transport h2`` (the default) serves :class:`InferenceService` as an ASGI app on inferd's
own HTTP/2 (zttp) protocol; ``--grpc-transport grpcio`` serves the same service with grpc.aio.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Protocol

from inferd.contracts.frontend import Frontend
from inferd.contracts.hookspecs import FrontendRegister, hookimpl
from inferd.frontends.header_forward import pattern_option
from inferd.serving.tls import TlsConfig, grpc_config

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.contracts.hookspecs import ServerSettings
    from inferd.frontends.grpc.service import InferenceService

TRANSPORTS = ("grpcio", "h2")
#: Largest message received or sent, as Triton's gRPC server allows (2 GiB - 1).
MAX_MESSAGE_BYTES = 2**31 - 1


class GrpcTransport(Protocol):
    """What serves the service on a port: grpc.aio, or inferd's own HTTP/2."""

    async def start(self, service: InferenceService, host: str, port: int) -> int:
        """Listen on ``host:port``; returns the port bound."""
        ...

    async def stop(self, grace: float) -> None:
        """Stop accepting; let calls in flight finish for up to ``grace`` seconds."""
        ...


class GrpcFrontend(Frontend):
    """``inference.GRPCInferenceService`` and ``grpc.health.v1.Health`` on ``host:port``."""

    name = "gRPC"

    def __init__(
        self,
        host: str,
        port: int,
        transport: str = "h2",
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        tls: TlsConfig | None = None,
        stream_max_inflight: int | None = None,
        forward_pattern: str | None = None,
    ) -> None:
        #: ``--grpc-header-forward-pattern`` (None: metadata is not forwarded).
        self.forward_pattern = forward_pattern
        self.host = host
        #: Requests one ModelStreamInfer call runs at once; None: the service's default (64).
        self.stream_max_inflight = stream_max_inflight
        self.tls = tls
        self.port = port
        self.transport_name = transport
        self.max_message_bytes = max_message_bytes
        self._transport: GrpcTransport | None = None
        self._service: InferenceService | None = None

    def _make_transport(self, reuse_port: bool) -> GrpcTransport:
        if self.transport_name == "h2":
            from inferd.frontends.grpc.h2_server import H2Transport

            return H2Transport(self.max_message_bytes, reuse_port, self.tls)
        from inferd.frontends.grpc.grpcio_transport import GrpcioTransport

        return GrpcioTransport(self.max_message_bytes, reuse_port, self.tls)

    async def start(self, dataplane: DataPlane) -> None:
        from inferd.frontends.grpc.service import STREAM_MAX_INFLIGHT, InferenceService

        self._service = InferenceService(
            dataplane, self.stream_max_inflight or STREAM_MAX_INFLIGHT, self.forward_pattern
        )
        transport = self._make_transport(dataplane.settings.shares_ports)  # --workers N share the port
        self.port = await transport.start(self._service, self.host, self.port)
        self._transport = transport

    async def stop(self, grace: float) -> None:
        if self._transport is not None:
            if self._service is not None:
                self._service.close()
            await self._transport.stop(grace)
            self._transport = None

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self) -> str:
        return f"{'grpcs' if self.tls else 'grpc'}://{self.address()}"


def _factory(options: ServerSettings) -> GrpcFrontend | None:
    if not options.allow_grpc:
        return None
    extra = options.extra
    return GrpcFrontend(
        extra.get("grpc_address") or options.host,
        options.grpc_port,
        transport=extra.get("grpc_transport", "h2"),
        max_message_bytes=extra.get("grpc_max_message_bytes", MAX_MESSAGE_BYTES),
        tls=grpc_config(extra),
        stream_max_inflight=extra.get("grpc_stream_max_inflight"),
        forward_pattern=extra.get("grpc_header_forward_pattern"),
    )


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("grpc", _factory)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("gRPC transport")
    g.add_argument(
        "--grpc-transport",
        choices=TRANSPORTS,
        default="h2",
        help="what serves gRPC: h2 (inferd's HTTP/2 on the zttp parser, the default; about 3x "
        "grpcio's throughput) or grpcio (grpc.aio)",
    )
    g.add_argument(
        "--grpc-max-message-bytes",
        type=int,
        default=MAX_MESSAGE_BYTES,
        metavar="BYTES",
        help="largest gRPC message received or sent; larger ones fail with RESOURCE_EXHAUSTED "
        f"(default: {MAX_MESSAGE_BYTES})",
    )
    g.add_argument(
        "--grpc-header-forward-pattern",
        type=pattern_option,
        default=None,
        metavar="REGEX",
        help="gRPC metadata of ModelInfer calls and ModelStreamInfer streams whose keys match REGEX "
        "(searched, case-insensitive unless it starts with (?-i)) reach the model as string "
        "request parameters, as Triton forwards them",
    )
    g.add_argument(
        "--grpc-stream-max-inflight",
        type=_positive,
        default=None,
        metavar="N",
        help="requests one ModelStreamInfer stream runs at once; past them the stream is not read "
        "until one is answered, and its responses wait in a queue of as many (default: 64)",
    )


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return number
