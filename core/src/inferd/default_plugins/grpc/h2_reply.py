"""The response side of one gRPC call over ASGI: headers once, messages, then the status trailers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import grpc

from inferd.default_plugins.grpc.framing import ACCEPT_ENCODING, GrpcFailure, frame, percent_encode, status_number

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_START = {"type": "http.response.start", "status": 200, "trailers": True,
          "headers": [(b"content-type", b"application/grpc")]}  # fmt: skip
_END_BODY = {"type": "http.response.body", "body": b"", "more_body": False}
_OK = {"type": "http.response.trailers", "headers": [(b"grpc-status", b"0")], "more_trailers": False}
#: Sent with UNIMPLEMENTED answers to a compressed call: what this server does take.
_ACCEPT = (b"grpc-accept-encoding", ACCEPT_ENCODING)


class Reply:
    """Writes one call's response; every path ends in :meth:`finish` or :meth:`unary`."""

    def __init__(self, send: Send, max_message_bytes: int) -> None:
        self.send = send
        self.max_message_bytes = max_message_bytes
        self.started = False
        self.done = False

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

    async def unary(self, parts: list[bytes | memoryview], size: int) -> None:
        """The one response message of a unary call, and status OK."""
        self._check_size(size)
        await self._start()
        await self.send({"type": "http.response.body", "body": frame(parts, size), "more_body": False})
        self.done = True
        await self.send(_OK)

    async def message(self, parts: list[bytes | memoryview], size: int) -> None:
        """One response message of a stream."""
        self._check_size(size)
        await self._start()
        await self.send({"type": "http.response.body", "body": frame(parts, size), "more_body": True})

    async def finish(self, status: grpc.StatusCode, message: str) -> None:
        """End the call with ``status`` (and ``message``, when not OK) in the trailers."""
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
        await self.send({"type": "http.response.trailers", "headers": trailers, "more_trailers": False})

    async def http_error(self, status: int, text: str) -> None:
        """A request that is not a gRPC call: a plain HTTP answer."""
        self.started = self.done = True
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(b"content-type", b"text/plain; charset=utf-8")]})  # fmt: skip
        await self.send({"type": "http.response.body", "body": text.encode(), "more_body": False})
