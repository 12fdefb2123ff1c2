"""The response side of one gRPC call over ASGI: headers once, messages, then the status trailers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import grpc

from inferd.frontends.grpc.framing import ACCEPT_ENCODING, GrpcFailure, frame, percent_encode, status_number

if TYPE_CHECKING:
    from inferd.serving import Headers

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_START = {
    "type": "http.response.start",
    "status": 200,
    "trailers": True,
    "headers": [(b"content-type", b"application/grpc")],
}
_END_BODY = {"type": "http.response.body", "body": b"", "more_body": False}
_OK = {"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False}
#: Sent with UNIMPLEMENTED answers to a compressed call: what this server does take.
_ACCEPT = (b"grpc-accept-encoding", ACCEPT_ENCODING)
#: Response bytes of a stream that may wait for the client's HTTP/2 flow-control window (a client
#: that does not read grants none) before the stream's next message waits until they are sent.
MAX_PARKED_BYTES = 1 << 20
#: How often a stream held back by its client's window looks whether it moved.
PARKED_POLL_SECONDS = 0.01
#: A stream whose client grants no window for this long is reset. While a stream waits, the
#: connection is not read (zttp grants HTTP/2 window as data arrives: the only way to hold a client
#: back is to stop reading), so a client gone meanwhile would go unnoticed: this bounds how long
#: its requests and responses stay held.
STALLED_SECONDS = 30.0


class Reply:
    """Writes one call's response; every path ends in :meth:`finish` or :meth:`unary`."""

    def __init__(self, send: Send, max_message_bytes: int) -> None:
        self.send = send
        self.max_message_bytes = max_message_bytes
        self.started = False
        self.done = False
        #: The serving package's stream (AsgiStream) whose ``send`` this is (its HTTP/2 stream says how many
        #: bytes wait for the client's window); None under another server.
        self._cycle = getattr(send, "__self__", None)

    def _check_size(self, size: int) -> None:
        if size > self.max_message_bytes:
            raise GrpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Sent message larger than max ({size} vs. {self.max_message_bytes})",
            )

    async def _start(self) -> None:
        if not self.started:
            self.started = True
            await self.send(_START)

    async def unary(self, parts: list[bytes | memoryview], size: int, trailers: Headers | None = None) -> None:
        """The one response message of a unary call, and status OK (with ``trailers`` after it)."""
        self._check_size(size)
        await self._start()
        await self.send({"type": "http.response.body", "body": frame(parts, size), "more_body": False})
        self.done = True
        if trailers:
            await self.send({**_OK, "headers": [(b"grpc-status", b"0"), *trailers]})
        else:
            await self.send(_OK)

    async def message(self, parts: list[bytes | memoryview], size: int) -> None:
        """One response message of a stream; once more than :data:`MAX_PARKED_BYTES` of them
        wait for the client's flow-control window, this waits until they went out."""
        self._check_size(size)
        await self._start()
        await self.send({"type": "http.response.body", "body": frame(parts, size), "more_body": True})
        cycle = self._cycle
        if cycle is not None and getattr(cycle, "pending_bytes", 0) > MAX_PARKED_BYTES:
            await _sent(cycle)

    async def finish(self, status: grpc.StatusCode, message: str, extra: list[tuple[str, str]] | None = None) -> None:
        """End the call with ``status`` (and ``message``, when not OK, and ``extra``) in the trailers."""
        if self.done:
            return
        await self._start()
        self.done = True
        await self.send(_END_BODY)
        if status is grpc.StatusCode.OK:
            await self.send(_OK)
            return
        trailers = [(b"grpc-status", b"%d" % status_number(status)), (b"grpc-message", percent_encode(message))]
        if status is grpc.StatusCode.UNIMPLEMENTED:
            trailers.append(_ACCEPT)
        trailers += ((k.encode(), v.encode("latin-1")) for k, v in extra or ())
        await self.send({"type": "http.response.trailers", "headers": trailers, "more_trailers": False})

    async def http_error(self, status: int, text: str) -> None:
        """A request that is not a gRPC call: a plain HTTP answer."""
        self.started = self.done = True
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8")],
            }
        )
        await self.send({"type": "http.response.body", "body": text.encode(), "more_body": False})


async def _sent(cycle: Any) -> None:
    """Wait until ``cycle``'s stream has at most half of :data:`MAX_PARKED_BYTES` waiting for the
    client's window, or the client went away (zttp tells of no window update: this polls, and only
    while a client holds its stream back). Past :data:`STALLED_SECONDS` without the client taking
    any of them, the stream is reset and the call fails with RESOURCE_EXHAUSTED."""
    loop = asyncio.get_running_loop()
    parked, since = cycle.pending_bytes, loop.time()
    while not cycle.disconnected and parked > MAX_PARKED_BYTES // 2:
        await asyncio.sleep(PARKED_POLL_SECONDS)
        now = cycle.pending_bytes
        if now < parked:
            since = loop.time()
        elif loop.time() - since > STALLED_SECONDS:
            cycle.abort_stream()
            raise GrpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the client read no response of this stream for {STALLED_SECONDS:g} s",
            )
        parked = now
