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

A peer's cost is bounded as nghttp2 and grpc bound it: a connection is not read while what the
server wrote to it is unsent past the transport's high-water mark (a peer that sends PINGs or
SETTINGS, which zttp acknowledges, or calls, without reading the answers, cannot make the server
buffer more); and control frames (SETTINGS, PING, WINDOW_UPDATE, RST_STREAM) beyond a budget
(:data:`CONTROL_FRAME_BURST`, refilled at :data:`CONTROL_FRAMES_PER_SECOND`) close the connection
with GOAWAY ENHANCE_YOUR_CALM (CVE-2019-9512, -9515 and kin). zttp itself bounds a request's
header list (it advertises and enforces SETTINGS_MAX_HEADER_LIST_SIZE 65,536: a larger header
block is answered GOAWAY ENHANCE_YOUR_CALM), refuses a connection's 4097th stream (rapid reset
too) and ignores empty DATA frames without handing them to Python.

zttp refuses a stream whose headers break RFC 9113 8.2 (RST_STREAM PROTOCOL_ERROR), a metadata
value that begins or ends with a space or tab among them (8.2.1), and has no setting to relax
that; grpcio and Triton accept and keep such values. The refusal is logged (once per connection),
since the client sees only the reset; ``--grpc-transport grpcio`` serves such clients.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import zttp
from uvicorn.protocols.http.zttp_h2_impl import ZttpH2Protocol

from inferd.serving.flow import HIGH_WATER_LIMIT, ReadingFlow
from inferd.serving.h2_stream import Headers, UnaryRoute, UnaryStream
from inferd.serving.writes import HeldWrites

#: Streams a connection takes before it is rotated (zttp's cap is 4096; leave room for races).
STREAMS_PER_CONNECTION = 4000
#: How often a rotated connection is checked, to be closed once idle.
IDLE_CHECK_SECONDS = 1.0
_PROTOCOL_ERROR = 0x1
_REFUSED_STREAM = 0x7
_ENHANCE_YOUR_CALM = 0xB
#: Control frames a connection may send at once; the allowance refills at the rate below. gRPC
#: clients send a few a second (BDP pings, batched WINDOW_UPDATEs); a flood sends millions.
CONTROL_FRAME_BURST = 10_000
CONTROL_FRAMES_PER_SECOND = 5_000
#: How long a connection closed for a flood may take to send its GOAWAY before it is dropped
#: (a peer that does not read would hold it forever).
CLOSE_GRACE_SECONDS = 2.0
_CONTROL = (zttp.Settings, zttp.Ping, zttp.WindowUpdate)

log = logging.getLogger(__name__)


class GrpcH2Protocol(ZttpH2Protocol):
    """HTTP/2 only (gRPC clients speak it with prior knowledge); one connection per 4000 calls."""

    alpn_protocols: ClassVar[list[str]] = ["h2"]
    streams_per_connection: ClassVar[int] = STREAMS_PER_CONNECTION
    #: The requests answered without ASGI, by raw path (:mod:`inferd.serving.h2_stream`).
    unary_routes: ClassVar[Mapping[bytes, UnaryRoute] | None] = None

    _streams = 0
    _last_stream: int | None = None
    #: The newest stream a request came from; a refusal of a later one is zttp's (:meth:`_refused`).
    _newest = 0
    _told_refusal = False
    #: Control frames the peer may still send now, and when that was counted.
    _allowance = float(CONTROL_FRAME_BURST)
    _counted_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = ReadingFlow(transport)
        self.transport = HeldWrites(transport)  # type: ignore[assignment]

    def handle_events(self) -> None:
        """uvicorn's dispatch of zttp's events, with control frames counted against the allowance."""
        conn = self.conn
        cycles = self.cycles
        while True:
            event: Any = conn.next_event()  # dispatched on its exact type below (narrowed by hand)
            kind = type(event)
            if kind is zttp.Data:
                cycle = cycles.get(event.stream_id)
                if cycle is None or cycle.response_complete:
                    continue
                cycle.body += event.data
                if len(cycle.body) > HIGH_WATER_LIMIT:
                    self.flow.pause_reading()
                cycle.message_event.set()
            elif kind is zttp.Request:
                self.handle_request(event)
            elif kind is zttp.EndOfMessage:
                cycle = cycles.get(event.stream_id)
                if cycle is None or cycle.response_complete:
                    continue
                cycle.more_body = False
                cycle.message_event.set()
            elif kind is zttp.NeedData or kind is zttp.ConnectionClosed:
                return
            elif kind in _CONTROL:  # zttp answers them (acks, send windows); they only cost here
                if not self._allow():
                    return
            elif kind is zttp.RstStream:
                if event.error_code == _PROTOCOL_ERROR and event.stream_id > self._newest:
                    self._refused(event.stream_id)
                self.handle_rst_stream(event)
                if not self._allow():
                    return
            elif kind is zttp.GoAway:
                self.shutdown_requested = True
                if not cycles:
                    self._close_connection()

    def _allow(self) -> bool:
        """Count one control frame; past the allowance, close the connection (ENHANCE_YOUR_CALM)."""
        now = self.loop.time()
        allowance = self._allowance + (now - self._counted_at) * CONTROL_FRAMES_PER_SECOND
        self._allowance = min(allowance, CONTROL_FRAME_BURST) - 1
        self._counted_at = now
        if self._allowance >= 0:
            return True
        if not self.transport.is_closing():
            log.info("%s: HTTP/2 control frame flood; closing the connection (GOAWAY ENHANCE_YOUR_CALM)", self.client)
            self.conn.close(_ENHANCE_YOUR_CALM)
            self.flush()
            self.transport.close()  # once what is written is sent, the GOAWAY last
            self.loop.call_later(CLOSE_GRACE_SECONDS, self.transport.abort)
        return False

    def _refused(self, stream_id: int) -> None:
        """zttp refused a new stream's headers (RST_STREAM PROTOCOL_ERROR, no request made of them):
        said once per connection, as the client only sees the reset."""
        self._newest = stream_id
        if self._told_refusal:
            return
        self._told_refusal = True
        log.warning(
            "%s: HTTP/2 stream %d refused (RST_STREAM PROTOCOL_ERROR): its headers break RFC 9113 8.2, most often "
            "a metadata value that begins or ends with a space or tab, which --grpc-transport grpcio accepts",
            self.client, stream_id,
        )  # fmt: skip

    def handle_request(self, event: zttp.Request) -> None:
        self._newest = event.stream_id
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
