"""uvicorn's zttp HTTP/2 protocol, with connections rotated before zttp's per-connection stream cap.

zttp 0.0.35 answers a connection's 4097th stream with GOAWAY ENHANCE_YOUR_CALM ("HTTP/2 flood
detected") and drops it, failing the calls in flight on it. So after :data:`STREAMS_PER_CONNECTION`
streams the server sends a graceful GOAWAY (NO_ERROR, naming the last stream it takes), answers
the streams it took, and leaves the closing to the client (gRPC clients close a connection that
went away once its calls end), closing it itself once it is idle; a stream the client opened in
between is refused (REFUSED_STREAM), which gRPC clients retry on their new connection.

uvicorn writes each ASGI send (headers, body, trailers) to the socket at once: three writes per
call. Here a connection's writes are gathered (:class:`~inferd.serving.writes.HeldWrites`) and
written once per event-loop iteration, so a call costs one write, and the responses of one batch share it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import ClassVar

import zttp
from uvicorn.protocols.http.zttp_h2_impl import ZttpH2Protocol

from inferd.serving.h2_stream import Headers, UnaryRoute, UnaryStream
from inferd.serving.writes import HeldWrites

#: Streams a connection takes before it is rotated (zttp's cap is 4096; leave room for races).
STREAMS_PER_CONNECTION = 4000
#: How often a rotated connection is checked, to be closed once idle.
IDLE_CHECK_SECONDS = 1.0
_REFUSED_STREAM = 0x7


class GrpcH2Protocol(ZttpH2Protocol):
    """HTTP/2 only (gRPC clients speak it with prior knowledge); one connection per 4000 calls."""

    alpn_protocols: ClassVar[list[str]] = ["h2"]
    streams_per_connection: ClassVar[int] = STREAMS_PER_CONNECTION
    #: The requests answered without ASGI, by raw path (:mod:`inferd.serving.h2_stream`).
    unary_routes: ClassVar[Mapping[bytes, UnaryRoute] | None] = None

    _streams = 0
    _last_stream: int | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = HeldWrites(transport)  # type: ignore[assignment]

    def handle_request(self, event: zttp.Request) -> None:
        if self._last_stream is not None and event.stream_id > self._last_stream:
            self.conn.stream(event.stream_id).reset(_REFUSED_STREAM)
            return
        self._streams += 1
        if not self._start_unary(event):
            super().handle_request(event)
        if self._streams >= self.streams_per_connection and self._last_stream is None:
            self._last_stream = event.stream_id
            self.conn.close(0, event.stream_id)
            self.loop.call_later(IDLE_CHECK_SECONDS, self._close_when_idle)

    def _start_unary(self, event: zttp.Request) -> bool:
        """Answer a request its route takes without ASGI (:mod:`inferd.serving.h2_stream`); False: not one."""
        routes = self.unary_routes
        if self.shutdown_requested or routes is None:
            return False
        route = routes.get(event.path)
        if route is None:
            return False
        handler = route(event.method, _header_list(event.headers))
        if handler is None:
            return False
        stream = UnaryStream(self.conn, event, self.transport, self.flow, self.resume_reading_if_idle)
        self.cycles[event.stream_id] = stream  # type: ignore[assignment]
        task = self.loop.create_task(stream.run(handler, self.on_response_complete))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        return True

    def _close_when_idle(self) -> None:
        if self.transport.is_closing():
            return
        if self.cycles:
            self.loop.call_later(IDLE_CHECK_SECONDS, self._close_when_idle)
            return
        self._close_connection()


def _header_list(headers: zttp.HeaderBlock | Headers) -> Headers:
    """A request's headers as pairs with lower-case names (as uvicorn gives them to ASGI)."""
    if isinstance(headers, zttp.HeaderBlock):
        return headers.to_list(lowercase_names=True)
    return [(name.lower(), value) for name, value in headers]


def protocol_class(unary: Mapping[bytes, UnaryRoute] | None) -> type[GrpcH2Protocol]:
    """:class:`GrpcH2Protocol` answering ``unary``'s requests without ASGI."""
    return type("GrpcH2Protocol", (GrpcH2Protocol,), {"unary_routes": unary})
