"""The ``h2`` transport's short path for plain unary calls: no ASGI in between.

A unary call (``ModelInfer`` above all) that is a POST with ``content-type: application/grpc``,
no ``grpc-encoding`` (or ``identity``) and no ``grpc-timeout`` is answered here, straight from the
HTTP/2 stream: the body is cut into its message, the RPC runs, and headers, the response message
and the status trailers are handed to zttp at once. Every other call (streams, compressed calls,
deadlines, anything odd) goes through :class:`~inferd.default_plugins.grpc.h2_app.GrpcApp` over
ASGI as before. The answers are the same either way: the RPCs, the checks on the message and the
statuses and messages of errors are shared with the ASGI path; this path only skips building an
ASGI scope and its messages, which was a fifth of the event loop's time per call.

The object stands in for uvicorn's request/response cycle in the protocol's bookkeeping (it has
the attributes the protocol reads and writes: ``body``, ``more_body``, ``message_event``,
``disconnected``, ``response_complete``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import grpc
import zttp

from inferd.default_plugins.grpc.framing import (
    ACCEPT_ENCODING,
    PREFIX_BYTES,
    GrpcFailure,
    MessageReader,
    frame,
    percent_encode,
    status_number,
)
from inferd.default_plugins.grpc.h2_app import Unary
from inferd.default_plugins.grpc.service import status_of
from inferd.errors import InferdError

log = logging.getLogger(__name__)

_HEADERS = [(b"content-type", b"application/grpc")]
_OK_TRAILERS = [(b"grpc-status", b"0")]
_REPEATED = b"\x00repeated"


class _Flow(Protocol):
    write_paused: bool

    async def drain(self) -> None: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


_WANTED = frozenset((b"content-type", b"grpc-encoding", b"grpc-timeout", b"te"))


def call_headers(headers: zttp.HeaderBlock | list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """The headers the short path reads, by lowercase name; a repeated one maps to a marker."""
    pairs = headers.to_list(lowercase_names=True) if isinstance(headers, zttp.HeaderBlock) else headers
    found: dict[bytes, bytes] = {}
    for name, value in pairs:
        name = name.lower()
        if name == b"te":  # any ``te: trailers`` lets trailers through, as uvicorn has it
            if value.strip().lower() == b"trailers":
                found[name] = b"trailers"
        elif name in _WANTED:
            found[name] = _REPEATED if name in found else value
    return found


def access_headers(headers: zttp.HeaderBlock | list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Every header of the call by lowercase name, for the access policy (servers with one only)."""
    pairs = headers.to_list(lowercase_names=True) if isinstance(headers, zttp.HeaderBlock) else headers
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in pairs}


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


class UnaryCall:
    """One plain unary call on one HTTP/2 stream, run by :meth:`run` as a task."""

    def __init__(
        self,
        method: Unary,
        max_message_bytes: int,
        conn: zttp.H2Connection,
        event: zttp.Request,
        headers: dict[bytes, bytes],
        transport: _Writer,
        flow: _Flow,
        resume_reading: Callable[[], None],
        headers_for_access: dict[str, str] | None = None,
    ) -> None:
        self.method = method
        #: Every header, when the server has access rules (``inferd.auth``); None otherwise.
        self.headers_for_access = headers_for_access
        self.max_message_bytes = max_message_bytes
        self.conn = conn
        self.stream = conn.stream(event.stream_id)
        self.transport = transport
        self.flow = flow
        self.resume_reading = resume_reading
        self.trailers_allowed = b"te" in headers
        self.path = event.path
        # What the protocol reads and writes on a cycle.
        self.body = bytearray()
        self.more_body = not event.end_stream
        self.message_event = asyncio.Event()
        self._disconnected = False
        #: The task running the RPC, while it runs: a client that goes away cancels it.
        self._task: asyncio.Task[None] | None = None
        self.response_complete = False

    @property
    def disconnected(self) -> bool:
        return self._disconnected

    @disconnected.setter
    def disconnected(self, value: bool) -> None:
        """The protocol sets it when the client resets the stream or the connection goes: the
        RPC running, if any, is cancelled (its request leaves the model's queue, its tenant's slot
        goes back at once)."""
        self._disconnected = value
        task = self._task
        if value and task is not None:
            self._task = None
            task.cancel()

    async def run(self, on_done: Callable[[int], None]) -> None:
        """Read the message, run the RPC, answer; ``on_done(stream_id)`` at the end, always."""
        try:
            try:
                body = await self._body()
            except GrpcFailure as exc:  # a message over --grpc-max-message-bytes: refused unread
                await self._answer(None, exc.status, exc.message)
                self._reset_unread()
                return
            if body is None:
                return
            try:
                self._task = asyncio.current_task()
                parts, size = await self.method(self._message(body), self.headers_for_access)
                self._task = None
                if size > self.max_message_bytes:
                    raise GrpcFailure(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"Sent message larger than max ({size} vs. {self.max_message_bytes})",
                    )
            except asyncio.CancelledError:
                if self._disconnected:
                    return  # the client went away: nothing to answer
                raise
            except GrpcFailure as exc:
                await self._answer(None, exc.status, exc.message)
            except InferdError as exc:
                await self._answer(None, status_of(exc), exc.message)
            except Exception as exc:
                log.exception("gRPC %s failed", self.path.decode("latin-1").rsplit("/", 1)[-1])
                await self._answer(None, grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            else:
                await self._answer(frame(parts, size), grpc.StatusCode.OK, "")
        finally:
            on_done(self.stream.stream_id)

    async def _body(self) -> bytes | bytearray | None:
        """The whole request body, or None when the client went away first.

        What arrived is taken out of ``body`` at each wake-up: the protocol stops reading the
        connection while a call holds more than its high-water mark, and resumes only once
        every call is under it (as uvicorn's own cycle does on each ``receive``).
        """
        chunks: list[bytearray] = []
        size = 0
        while self.more_body and not self.disconnected:
            if self.body:
                chunks.append(self.body)
                self.body = bytearray()
                size = self._check_size(chunks, size)
            self.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected:
            return None
        if self.body:
            chunks.append(self.body)
            self.body = bytearray()
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def _check_size(self, chunks: list[bytearray], before: int) -> int:
        """Refuse a message whose prefix (or whose bytes so far) say it is over the limit, before
        more of it is read; returns the bytes received."""
        size = before + len(chunks[-1])
        if before < PREFIX_BYTES <= size:
            head = chunks[0] if len(chunks[0]) >= PREFIX_BYTES else b"".join(chunks)
            declared = int.from_bytes(head[1:PREFIX_BYTES], "big")
            if declared > self.max_message_bytes:
                raise GrpcFailure(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Received message larger than max ({declared} vs. {self.max_message_bytes})",
                )
        return size

    def _reset_unread(self) -> None:
        """After an early answer, reset the stream (NO_ERROR: the trailers' status stands, as the
        gRPC protocol says) so the client stops sending the rest."""
        if self.more_body and not self.disconnected and not self.transport.is_closing():
            self.stream.reset(0)
            self.transport.write(self.conn.data_to_send())

    def _message(self, body: bytes | bytearray) -> memoryview:
        """The single request message of the call (the checks and messages of the ASGI path)."""
        reader = MessageReader(self.max_message_bytes)
        messages = reader.feed(body)
        reader.finish()
        if len(messages) != 1:
            raise GrpcFailure(
                grpc.StatusCode.INTERNAL, f"a unary call takes one request message, this one sent {len(messages)}"
            )
        return messages[0]

    async def _answer(self, data: bytes | None, status: grpc.StatusCode, message: str) -> None:
        """Headers, the message (if any) and the status trailers, in one write."""
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected or self.transport.is_closing():
            return
        stream = self.stream
        stream.send_response(200, _HEADERS)
        if data:
            stream.send_data(data)
        if not self.trailers_allowed:
            trailers = None
        elif status is grpc.StatusCode.OK:
            trailers = _OK_TRAILERS
        else:
            trailers = [(b"grpc-status", b"%d" % status_number(status)), (b"grpc-message", percent_encode(message))]
            if status is grpc.StatusCode.UNIMPLEMENTED:
                trailers.append((b"grpc-accept-encoding", ACCEPT_ENCODING))
        stream.end_message(trailers)
        self.response_complete = True
        self.message_event.set()
        self.transport.write(self.conn.data_to_send())
