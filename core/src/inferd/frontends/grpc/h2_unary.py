"""The ``h2`` transport's short path for plain unary calls: no ASGI in between.

A unary call (``ModelInfer`` above all) that is a POST with ``content-type: application/grpc``,
no ``grpc-encoding`` (or ``identity``) and no ``grpc-timeout`` is answered here, straight from the
HTTP/2 stream: the body is cut into its message, the RPC runs, and headers, the response message
and the status trailers are handed to zttp at once. Every other call (streams, compressed calls,
deadlines, anything odd) goes through :class:`~inferd.frontends.grpc.h2_app.GrpcApp` over
ASGI as before. The answers are the same either way: the RPCs, the checks on the message and the
statuses and messages of errors are shared with the ASGI path; this path only skips building an
ASGI scope and its messages, which was a fifth of the event loop's time per call.

The HTTP/2 side (reading the stream's body, writing headers, data and trailers) is
:class:`~inferd.serving.UnaryStream`'s; this module is the gRPC side of that seam: which calls
take the short path (:func:`unary_routes`), the message, the RPC and the status trailers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import grpc

from inferd.contracts.errors import InferdError
from inferd.frontends.grpc.framing import (
    ACCEPT_ENCODING,
    PREFIX_BYTES,
    GrpcFailure,
    MessageReader,
    error_trailers,
    percent_encode,
    prefix,
    status_number,
)
from inferd.frontends.grpc.h2_app import GrpcApp, Unary
from inferd.frontends.grpc.service import CALL_TRAILERS, INFER_RPC, status_of
from inferd.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, report

if TYPE_CHECKING:
    from inferd.serving import Headers, UnaryHandler, UnaryRoute, UnaryStream
    from inferd.serving.h2_send import Body

log = logging.getLogger(__name__)

_HEADERS = [(b"content-type", b"application/grpc")]
_OK_TRAILERS = [(b"grpc-status", b"0")]
_REPEATED = b"\x00repeated"
_INFER_PATH = INFER_RPC.path.encode("ascii")


_LOAD_FORMAT, _LOAD_REPORT = FORMAT_HEADER.encode(), REPORT_HEADER.encode()
_WANTED = frozenset((b"content-type", b"grpc-encoding", b"grpc-timeout", b"te", _LOAD_FORMAT))


def call_headers(headers: Headers) -> dict[bytes, bytes]:
    """The headers the short path reads, by lowercase name; a repeated one maps to a marker."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        name = name.lower()
        if name == b"te":  # any ``te: trailers`` lets trailers through
            if value.strip().lower() == b"trailers":
                found[name] = b"trailers"
        elif name in _WANTED:
            found[name] = _REPEATED if name in found else value
    return found


def access_headers(headers: Headers) -> dict[str, str]:
    """Every header of the call by lowercase name, for the access policy and metadata forwarding
    (servers with either only)."""
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers}


def is_plain_unary(method: bytes, headers: dict[bytes, bytes]) -> bool:
    """Whether the call can skip ASGI: POST, gRPC content type, uncompressed, no deadline."""
    if method != b"POST":
        return False
    content_type = headers.get(b"content-type", b"")
    if content_type is _REPEATED or not content_type.startswith(b"application/grpc"):
        return False
    encoding = headers.get(b"grpc-encoding")
    if encoding is not None and encoding != b"identity":
        return False
    return b"grpc-timeout" not in headers


def unary_routes(app: GrpcApp) -> dict[bytes, UnaryRoute]:
    """The short path's route for each unary method of ``app``, by the path as it comes off the wire."""
    return {path: _route(app, path, method) for path, method in app.unary_by_raw_path.items()}


def _route(app: GrpcApp, path: bytes, method: Unary) -> UnaryRoute:
    def route(verb: bytes, headers: Headers) -> UnaryHandler | None:
        """A plain unary call's handler; None: the call goes over ASGI."""
        found = call_headers(headers)
        if not is_plain_unary(verb, found):
            return None
        service = app.service
        access = access_headers(headers) if service.policy is not None or service.forward is not None else None
        call = UnaryCall(method, app.max_message_bytes, path, found, access)
        if _LOAD_FORMAT in found and path == _INFER_PATH:  # an ORCA load report in the trailers
            call.load_report = partial(report, service.dp, found[_LOAD_FORMAT].decode("latin-1"))
        return call.run

    return route


class UnaryCall:
    """One plain unary call, answered on its HTTP/2 stream by :meth:`run`."""

    def __init__(
        self,
        method: Unary,
        max_message_bytes: int,
        path: bytes,
        headers: dict[bytes, bytes],
        headers_for_access: dict[str, str] | None = None,
    ) -> None:
        self.method = method
        #: Every header, when the server has access rules (``inferd.auth``) or forwards metadata; else None.
        self.headers_for_access = headers_for_access
        self.max_message_bytes = max_message_bytes
        self.trailers_allowed = b"te" in headers
        self.path = path
        self._prefix_checked = False
        #: ``endpoint-load-metrics-format`` on a ModelInfer call: makes its ORCA report (None: not asked).
        self.load_report: Callable[[], str | None] | None = None

    async def run(self, stream: UnaryStream) -> None:
        """Read the message, run the RPC, answer."""
        try:
            body = await stream.read_body(self._check_size)
        except GrpcFailure as exc:  # a message over --grpc-max-message-bytes: refused unread
            await self._answer(stream, None, exc.status, exc.message)
            stream.reset_unread()
            return
        if body is None:
            return
        try:
            parts, size = await self.method(self._message(body), self.headers_for_access)
            if size > self.max_message_bytes:
                raise GrpcFailure(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Sent message larger than max ({size} vs. {self.max_message_bytes})",
                )
        except GrpcFailure as exc:
            await self._answer(stream, None, exc.status, exc.message, exc.trailers)
        except InferdError as exc:
            await self._answer(stream, None, status_of(exc), exc.message, error_trailers(exc))
        except Exception as exc:
            log.exception("gRPC %s failed", self.path.decode("latin-1").rsplit("/", 1)[-1])
            await self._answer(stream, None, grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        else:
            await self._answer(stream, [prefix(size), *parts], grpc.StatusCode.OK, "")

    def _check_size(self, chunks: list[Body], size: int) -> int | None:
        """Refuse a message whose prefix says it is over the limit, before more of it is read;
        the body's size a one-message call sends, once the prefix is in (None before)."""
        if not self._prefix_checked and size >= PREFIX_BYTES:
            self._prefix_checked = True
            head = chunks[0] if len(chunks[0]) >= PREFIX_BYTES else b"".join(chunks[:PREFIX_BYTES])
            declared = int.from_bytes(head[1:PREFIX_BYTES], "big")
            if declared > self.max_message_bytes:
                raise GrpcFailure(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({declared} vs. {self.max_message_bytes})",
                )
            return PREFIX_BYTES + declared
        return None

    def _message(self, body: Body) -> memoryview:
        """The single request message of the call (the checks and messages of the ASGI path)."""
        reader = MessageReader(self.max_message_bytes)
        messages = reader.feed(body)
        reader.finish()
        if len(messages) != 1:
            raise GrpcFailure(
                grpc.StatusCode.INTERNAL, f"a unary call takes one request message, this one sent {len(messages)}"
            )
        return messages[0]

    async def _answer(
        self,
        stream: UnaryStream,
        message_parts: list[bytes | memoryview] | None,
        status: grpc.StatusCode,
        message: str,
        extra: list[tuple[str, str]] | None = None,
    ) -> None:
        """Headers, the message (its length prefix and parts, uncopied; None: no message) and the
        status trailers (an error's ``extra`` after them)."""
        if not self.trailers_allowed:
            trailers = None
        elif status is grpc.StatusCode.OK:
            trailers = _OK_TRAILERS
            if self.load_report is not None and (value := self.load_report()) is not None:
                trailers = [*_OK_TRAILERS, (_LOAD_REPORT, value.encode("latin-1"))]
            if (extra := CALL_TRAILERS.get()) is not None:  # server-timing, x-tokens-used
                trailers = [*trailers, *((k.encode(), v.encode("latin-1")) for k, v in extra)]
        else:
            trailers = [(b"grpc-status", b"%d" % status_number(status)), (b"grpc-message", percent_encode(message))]
            if status is grpc.StatusCode.UNIMPLEMENTED:
                trailers.append((b"grpc-accept-encoding", ACCEPT_ENCODING))
            trailers += ((k.encode(), v.encode("latin-1")) for k, v in extra or ())
        await stream.answer(_HEADERS, message_parts or [], trailers)
