"""The ``h2`` transport's ASGI app: gRPC calls over HTTP/2 with response trailers.

Each HTTP/2 stream is one call: ``POST /<service>/<method>``, the request body a sequence of
length-prefixed messages, the response body the same, and the status in the trailers
(``grpc-status``, ``grpc-message``). The RPCs are :class:`InferenceService`'s, the same methods
the ``grpcio`` transport calls.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from functools import partial
from typing import Any, Protocol

import grpc

from inferd.contracts.errors import InferdError
from inferd.frontends.grpc.codec import WireRequest, response_parts, serialize_stream, split_infer_request
from inferd.frontends.grpc.framing import GrpcFailure, MessageReader, check_encoding, error_trailers, parse_timeout
from inferd.frontends.grpc.h2_reply import Reply
from inferd.frontends.grpc.service import (
    CALL_TRAILERS,
    INFER_RPC,
    STREAM_RPC,
    UNARY,
    InferenceService,
    Rpc,
    status_of,
    wants_grpc_error,
)
from inferd.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, report

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Parts = tuple[list[bytes | memoryview], int]


class Unary(Protocol):
    """A unary RPC: the request message (bytes) and, on a server with access rules or metadata
    forwarding, the call's headers -> the response as pieces to join, and their size."""

    def __call__(self, data: memoryview, headers: Mapping[str, str] | None = None) -> Awaitable[Parts]: ...


STREAM_PATH = STREAM_RPC.path


class Disconnected(Exception):
    """The client reset the stream or the connection went away."""


async def _run(
    svc: InferenceService,
    rpc: Rpc,
    method: Callable[[Any], Awaitable[Any]],
    request: Any,
    headers: Mapping[str, str] | None,
) -> Any:
    """``method(request)``, admitted by the policy first when the server has one (a refusal is an
    :class:`~inferd.contracts.errors.InferdError`: the call answers its kind's status)."""
    if svc.policy is None:
        return await method(request)
    return await svc.admitted(rpc, method, request, headers or {})


def _protobuf_method(svc: InferenceService, rpc: Rpc) -> Unary:
    method = getattr(svc, rpc.name)

    async def call(data: memoryview, headers: Mapping[str, str] | None = None) -> Parts:
        try:
            request = rpc.request.FromString(data)
        except Exception:
            raise GrpcFailure(grpc.StatusCode.INTERNAL, "Exception deserializing request!") from None
        out = (await _run(svc, rpc, method, request, headers)).SerializeToString()
        return [out], len(out)

    return call


def unary_methods(svc: InferenceService) -> dict[str, Unary]:
    """Every unary RPC of :data:`~inferd.frontends.grpc.service.RPCS`, by request path."""
    methods = {rpc.path: _protobuf_method(svc, rpc) for rpc in UNARY}

    async def model_infer(data: memoryview, headers: Mapping[str, str] | None = None) -> Parts:
        if svc.policy is None:
            return response_parts(await svc.ModelInfer(split_infer_request(data), headers))
        infer = svc.ModelInfer if svc.forward is None else partial(svc.ModelInfer, metadata=headers)
        return response_parts(await _run(svc, INFER_RPC, infer, split_infer_request(data), headers))

    methods[INFER_RPC.path] = model_infer
    return methods


def _call_headers(scope: Scope) -> dict[str, str]:
    """The request headers a call reads; a repeated header keeps its last value."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}


class GrpcApp:
    """The ASGI app: routes each call by path to :class:`InferenceService`."""

    def __init__(self, service: InferenceService, max_message_bytes: int) -> None:
        self.service = service
        self.max_message_bytes = max_message_bytes
        self.unary = unary_methods(service)
        #: The same methods by the path as it comes off the wire (for the short path of ``h2_unary``).
        self.unary_by_raw_path = {path.encode("ascii"): method for path, method in self.unary.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        reply = Reply(send, self.max_message_bytes)
        headers = _call_headers(scope)
        if scope["method"] != "POST" or not headers.get("content-type", "").startswith("application/grpc"):
            await reply.http_error(415, "gRPC calls are POST requests with content-type application/grpc")
            return
        try:
            encoding = headers.get("grpc-encoding", "identity")
            check_encoding(encoding)
            timeout = headers.get("grpc-timeout")
            seconds = None if timeout is None else parse_timeout(timeout)
            reader = MessageReader(self.max_message_bytes, encoding)
            call = self._call(scope["path"], headers, receive, reader, reply)
            await (call if seconds is None else asyncio.wait_for(call, seconds))
        except GrpcFailure as exc:
            await reply.finish(exc.status, exc.message, exc.trailers)
        except TimeoutError:
            await reply.finish(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        except Disconnected:
            return
        except Exception as exc:  # a bug here must still end the call with a status
            log.exception("gRPC call %s failed", scope["path"])
            await reply.finish(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

    async def _call(
        self, path: str, headers: dict[str, str], receive: Receive, reader: MessageReader, reply: Reply
    ) -> None:
        if path == STREAM_PATH:
            await self._stream(wants_grpc_error(headers.items()), receive, reader, reply, headers)
            return
        method = self.unary.get(path)
        if method is None:
            raise GrpcFailure(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        request = await self._one_message(receive, reader)
        try:
            parts, size = await method(request, headers)
        except InferdError as exc:
            raise GrpcFailure(status_of(exc), exc.message, error_trailers(exc)) from None
        except GrpcFailure:
            raise
        except Exception as exc:
            log.exception("gRPC %s failed", path.rsplit("/", 1)[-1])
            raise GrpcFailure(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}") from None
        trailers = None
        asked = headers.get(FORMAT_HEADER)
        if asked is not None and path == INFER_RPC.path:  # an ORCA load report in the trailers
            value = report(self.service.dp, asked)
            trailers = None if value is None else [(REPORT_HEADER.encode(), value.encode("latin-1"))]
        if (extra := CALL_TRAILERS.get()) is not None:  # server-timing, x-tokens-used
            trailers = [*(trailers or ()), *((k.encode(), v.encode("latin-1")) for k, v in extra)]
        await reply.unary(parts, size, trailers)

    async def _one_message(self, receive: Receive, reader: MessageReader) -> memoryview:
        """The single request message of a unary call."""
        messages: list[memoryview] = []
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                raise Disconnected
            messages += reader.feed(event.get("body", b""))
            if not event.get("more_body", False):
                break
        reader.finish()
        if len(messages) != 1:
            raise GrpcFailure(
                grpc.StatusCode.INTERNAL, f"a unary call takes one request message, this one sent {len(messages)}"
            )
        return messages[0]

    async def _stream(
        self, grpc_error: bool, receive: Receive, reader: MessageReader, reply: Reply, headers: Mapping[str, str]
    ) -> None:
        """ModelStreamInfer: requests are read as they arrive, responses written as they come."""
        try:
            grant = self.service.open_stream(headers)
        except InferdError as exc:  # refused
            raise GrpcFailure(status_of(exc), exc.message, error_trailers(exc)) from None
        requests = StreamRequests(receive, reader)
        try:
            async for item in self.service.ModelStreamInfer(requests.read(), grpc_error, grant, headers):
                data = serialize_stream(item)
                await reply.message([data], len(data))
        except asyncio.CancelledError:
            if requests.disconnected:
                raise Disconnected from None
            raise
        except InferdError as exc:
            raise GrpcFailure(status_of(exc), exc.message, error_trailers(exc)) from None
        if requests.failure is not None:
            raise requests.failure
        await reply.finish(grpc.StatusCode.OK, "")


class StreamRequests:
    """The request messages of one stream, as they arrive.

    A bad frame ends them and is kept in ``failure`` (the call then ends with its status, once the
    requests already read are answered); a client that goes away cancels the call.
    """

    def __init__(self, receive: Receive, reader: MessageReader) -> None:
        self.receive = receive
        self.reader = reader
        self.call = asyncio.current_task()
        self.failure: GrpcFailure | None = None
        self.disconnected = False

    async def read(self) -> AsyncIterator[WireRequest]:
        try:
            while True:
                event = await self.receive()
                if event["type"] == "http.disconnect":
                    self.disconnected = True
                    if self.call is not None:
                        self.call.cancel()
                    return
                for message in self.reader.feed(event.get("body", b"")):
                    yield split_infer_request(message)
                if not event.get("more_body", False):
                    self.reader.finish()
                    return
        except GrpcFailure as exc:
            self.failure = exc
