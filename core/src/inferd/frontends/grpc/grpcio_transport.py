"""The ``grpcio`` transport: grpc.aio generic handlers over :class:`InferenceService`."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc

from inferd.contracts.errors import InferdError, StartupError
from inferd.frontends.grpc.codec import (
    WireRequest,
    serialize_infer,
    serialize_stream,
    split_infer_request,
)
from inferd.frontends.grpc.framing import error_trailers
from inferd.frontends.grpc.service import (
    CALL_TRAILERS,
    INFER_RPC,
    RPCS,
    STREAM_RPC,
    UNARY,
    InferenceService,
    Rpc,
    metadata_dict,
    status_of,
    wants_grpc_error,
)
from inferd.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, report
from inferd.serving.tls import CertificateWatch, TlsConfig, TlsError, forget, reload_on_sighup, server_context

log = logging.getLogger(__name__)


def server_options(max_message_bytes: int, reuse_port: bool = False) -> list[tuple[str, Any]]:
    """Channel options, as Triton's gRPC server sets them: messages up to ``max_message_bytes``
    (2 GiB - 1 by default: large tensors), no port sharing (unless the ``--workers`` share the
    port: ``reuse_port``), and Triton's keepalive defaults."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.so_reuseport", int(reuse_port)),
        ("grpc.keepalive_time_ms", 7_200_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 2),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 300_000),
        ("grpc.http2.max_ping_strikes", 2),
    ]


#: grpc.aio servers sharing the port on the one event loop. A grpc.aio server asks its core for
#: the next call only once the previous one has reached the loop (a round trip through grpc's poller
#: thread per call), so at c=64 calls trickle in one by one and the dynamic batcher runs batches of
#: ~2. Sixteen servers take up to sixteen calls per round: on the tiny model that halved the CPU per
#: call and doubled the calls/s (measured with benchmarks/vs_triton.py; 8 servers cost 13% more CPU per call, 32 4%).
SERVERS = 16


class GrpcioTransport:
    """grpc.aio on the server's loop, with the codec's own (de)serializers (over TLS with ``tls``):
    ``servers`` grpc.aio servers share the port (SO_REUSEPORT), each accepting calls on its own."""

    def __init__(
        self, max_message_bytes: int, reuse_port: bool = False, tls: TlsConfig | None = None, servers: int = SERVERS
    ) -> None:
        self.max_message_bytes = max_message_bytes
        self.reuse_port = reuse_port
        self.tls = tls
        self.servers = servers
        self._servers: list[grpc.aio.Server] = []
        self._watch: CertificateWatch[grpc.ServerCertificateConfiguration] | None = None

    async def start(self, service: InferenceService, host: str, port: int) -> int:
        credentials: list[grpc.ServerCredentials | None] = [None] * self.servers
        if self.tls is not None:
            secure, self._watch = reloading_credentials(self.tls, self.servers)
            credentials = list(secure)
        shared = self.reuse_port or self.servers > 1
        if shared and not self.reuse_port and port != 0:
            # SO_REUSEPORT would also share the port with another server that set it: refuse a port
            # that anything listens on, as a plain bind would
            busy = _bind_error(host, port)
            if busy:
                raise StartupError(f"gRPC frontend cannot bind {_address(host, port)}: {busy}")
        handlers = build_handlers(service)
        options = server_options(self.max_message_bytes, shared)
        try:
            for server_credentials in credentials:
                server = grpc.aio.server(options=options)
                server.add_generic_rpc_handlers(handlers)
                port = _add_port(server, host, port, server_credentials)  # the next ones share the port bound
                await server.start()
                self._servers.append(server)
        except BaseException:
            await self.stop(0)
            raise
        return port

    async def stop(self, grace: float) -> None:
        if self._watch is not None:
            forget(self._watch)
            self._watch = None
        servers, self._servers = self._servers, []
        await asyncio.gather(*(server.stop(grace) for server in servers))


def _add_port(server: grpc.aio.Server, host: str, port: int, credentials: grpc.ServerCredentials | None) -> int:
    """Bind ``server`` to ``host:port``; the port bound, or a StartupError saying why not."""
    address = _address(host, port)
    try:
        if credentials is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        bound, reason = 0, str(exc)
    else:
        reason = "the address is in use or not available"
    if bound == 0:
        raise StartupError(f"gRPC frontend cannot bind {address}: {_bind_error(host, port) or reason}")
    return bound


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def certificate_configuration(config: TlsConfig) -> grpc.ServerCertificateConfiguration:
    """``config``'s files for grpc, checked first as :func:`inferd.serving.tls.server_context` checks them."""
    server_context(config)
    assert config.key is not None  # the gRPC flags always name a key

    def read(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    root = read(config.ca) if config.ca else None
    return grpc.ssl_server_certificate_configuration([(read(config.key), read(config.cert))], root_certificates=root)


def reloading_credentials(
    config: TlsConfig, count: int = 1
) -> tuple[list[grpc.ServerCredentials], CertificateWatch[Any]]:
    """``count`` server credentials (one per server: grpc hands a credentials' first configuration to
    one server only) that take changed certificate files for new connections (grpc asks before each
    handshake), and the watch behind them (reloaded on SIGHUP until :func:`inferd.serving.tls.forget`)."""
    try:
        watch = CertificateWatch(config, certificate_configuration, "gRPC frontend")
    except TlsError as exc:
        raise StartupError(f"gRPC frontend: {exc}") from None
    reload_on_sighup(watch)
    return [_credentials(watch, config.verify_client) for _ in range(count)], watch


def _credentials(watch: CertificateWatch[Any], verify_client: bool) -> grpc.ServerCredentials:
    handed = [watch.generation]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            watch.poll()
        except Exception:  # a failed reload must not fail the handshake
            log.exception("gRPC frontend: TLS certificate check failed")
        if watch.generation == handed[0]:
            return None
        handed[0] = watch.generation
        return watch.value

    return grpc.dynamic_ssl_server_credentials(watch.value, fetch, verify_client)


def _bind_error(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, in the OS's words (gRPC's own error does not say)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc binds: TIME_WAIT is no conflict
            sock.bind((host.strip("[]"), port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def _load_report(context: grpc.aio.ServicerContext, svc: InferenceService) -> None:
    """With ``endpoint-load-metrics-format`` in the call's metadata, its ORCA load report in the
    trailing metadata; so are ``server-timing`` and ``x-tokens-used`` when the call has them."""
    trailers: list[tuple[str, str]] = []
    for key, value in context.invocation_metadata() or ():
        if key == FORMAT_HEADER and isinstance(value, str):
            found = report(svc.dp, value)
            if found is not None:
                trailers.append((REPORT_HEADER, found))
            break
    if (extra := CALL_TRAILERS.get()) is not None:
        trailers += extra
    if trailers:
        context.set_trailing_metadata(tuple(trailers))


def _unary(
    method: Callable[..., Awaitable[Any]],
    rpc: Rpc,
    svc: InferenceService | None = None,
    forwards: bool = False,
    reports: InferenceService | None = None,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """Turn InferdError (an access refusal too) into the mapped status; anything else is INTERNAL
    (and logged). With ``svc`` (a server with access rules), the call is admitted by its policy
    first, as ``rpc``'s group; with ``forwards``, ``method`` is given the call's metadata
    (``--grpc-header-forward-pattern``)."""

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            if svc is None and not forwards:
                return await method(request)
            metadata = metadata_dict(context.invocation_metadata() or ())
            call = partial(method, metadata=metadata) if forwards else method
            if svc is None:
                return await call(request)
            return await svc.admitted(rpc, call, request, metadata)
        except InferdError as exc:
            await context.abort(status_of(exc), exc.message, tuple(error_trailers(exc)))
        except Exception as exc:
            log.exception("gRPC %s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    if reports is None:
        return handler
    svc_reporting = reports

    async def reporting(request: Any, context: grpc.aio.ServicerContext) -> Any:
        """``handler``, then the ORCA load report the call asked for (the load once answered)."""
        result = await handler(request, context)
        _load_report(context, svc_reporting)
        return result

    return reporting


def _stream(svc: InferenceService) -> Callable[[AsyncIterator[WireRequest], grpc.aio.ServicerContext], Any]:
    """ModelStreamInfer: with ``triton_grpc_error`` an error ends the stream with its status."""

    async def handler(requests: AsyncIterator[WireRequest], context: grpc.aio.ServicerContext) -> Any:
        metadata = context.invocation_metadata() or ()
        grpc_error = wants_grpc_error(metadata)
        text = metadata_dict(metadata)
        try:
            grant = svc.open_stream(text)
        except InferdError as exc:  # refused
            await context.abort(status_of(exc), exc.message, tuple(error_trailers(exc)))
        try:
            async for item in svc.ModelStreamInfer(requests, grpc_error, grant, text):
                yield item
        except InferdError as exc:
            await context.abort(status_of(exc), exc.message, tuple(error_trailers(exc)))

    return handler


def build_handlers(svc: InferenceService) -> list[grpc.GenericRpcHandler]:
    """Generic handlers for every RPC of :data:`~inferd.frontends.grpc.service.RPCS`, by service."""
    unary = grpc.unary_unary_rpc_method_handler
    guard = svc if svc.policy is not None else None
    methods: dict[Rpc, grpc.RpcMethodHandler] = {
        rpc: unary(
            _unary(getattr(svc, rpc.name), rpc, guard),
            request_deserializer=rpc.request.FromString,
            response_serializer=rpc.response.SerializeToString,
        )
        for rpc in UNARY
    }
    methods[INFER_RPC] = unary(
        _unary(svc.ModelInfer, INFER_RPC, guard, forwards=svc.forward is not None, reports=svc),
        request_deserializer=split_infer_request,
        response_serializer=serialize_infer,
    )
    methods[STREAM_RPC] = grpc.stream_stream_rpc_method_handler(
        _stream(svc), request_deserializer=split_infer_request, response_serializer=serialize_stream
    )
    services = dict.fromkeys(rpc.service for rpc in RPCS)
    return [
        grpc.method_handlers_generic_handler(service, {r.name: h for r, h in methods.items() if r.service == service})
        for service in services
    ]
