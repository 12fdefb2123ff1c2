"""uvicorn's zttp HTTP/2 protocol, with connections rotated before zttp's per-connection stream cap.

zttp 0.0.35 answers a connection's 4097th stream with GOAWAY ENHANCE_YOUR_CALM ("HTTP/2 flood
detected") and drops it, failing the calls in flight on it. So after :data:`STREAMS_PER_CONNECTION`
streams the server sends a graceful GOAWAY (NO_ERROR, naming the last stream it takes), answers
the streams it took, and leaves the closing to the client (gRPC clients close a connection that
went away once its calls end), closing it itself once it is idle; a stream the client opened in
between is refused (REFUSED_STREAM), which gRPC clients retry on their new connection.

uvicorn writes each ASGI send (headers, body, trailers) to the socket at once: three writes per
call. Here a connection's writes are gathered and written once per event-loop iteration, so a
call costs one write, and the responses of one batch share it.

A peer's cost is bounded as nghttp2 and grpc bound it: a connection is not read while what the
server wrote to it is unsent past the transport's high-water mark (a peer that sends PINGs or
SETTINGS, which zttp acknowledges, or calls, without reading the answers, cannot make the server
buffer more); and control frames (SETTINGS, PING, WINDOW_UPDATE, RST_STREAM) beyond a budget
(:data:`CONTROL_FRAME_BURST`, refilled at :data:`CONTROL_FRAMES_PER_SECOND`) close the connection
with GOAWAY ENHANCE_YOUR_CALM (CVE-2019-9512, -9515 and kin). zttp itself bounds a request's
header list (it advertises and enforces SETTINGS_MAX_HEADER_LIST_SIZE 65,536: a larger header
block is answered GOAWAY ENHANCE_YOUR_CALM), refuses a connection's 4097th stream (rapid reset
too) and ignores empty DATA frames without handing them to Python.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import zttp
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.zttp_h2_impl import ZttpH2Protocol

from inferd.asgi_server import ReadingFlow
from inferd.default_plugins.grpc.h2_app import GrpcApp
from inferd.default_plugins.grpc.h2_unary import UnaryCall, access_headers, call_headers, is_plain_unary

#: Streams a connection takes before it is rotated (zttp's cap is 4096; leave room for races).
STREAMS_PER_CONNECTION = 4000
#: How often a rotated connection is checked, to be closed once idle.
IDLE_CHECK_SECONDS = 1.0
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


class CorkedTransport:
    """Gathers writes and hands them to ``transport`` in one write, soon (or before a close)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending = []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GrpcH2Protocol(ZttpH2Protocol):
    """HTTP/2 only (gRPC clients speak it with prior knowledge); one connection per 4000 calls."""

    alpn_protocols: ClassVar[list[str]] = ["h2"]
    streams_per_connection: ClassVar[int] = STREAMS_PER_CONNECTION

    _streams = 0
    _last_stream: int | None = None
    #: Control frames the peer may still send now, and when that was counted.
    _allowance = float(CONTROL_FRAME_BURST)
    _counted_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = ReadingFlow(transport)
        self.transport = CorkedTransport(transport, self.loop)  # type: ignore[assignment]

    def handle_events(self) -> None:
        """uvicorn's dispatch of zttp's events, with control frames counted against the allowance."""
        conn = self.conn
        cycles = self.cycles
        while True:
            event = conn.next_event()
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
        """Answer a plain unary call without ASGI (see :mod:`h2_unary`); False: not one."""
        app = self.config.app
        if self.shutdown_requested or not isinstance(app, GrpcApp):
            return False
        method = app.unary_by_raw_path.get(event.path)
        if method is None:
            return False
        headers = call_headers(event.headers)
        if not is_plain_unary(event.method, headers):
            return False
        call = UnaryCall(
            method,
            app.max_message_bytes,
            self.conn,
            event,
            headers,
            self.transport,
            self.flow,
            self.resume_reading_if_idle,
            access_headers(event.headers) if app.service.policy is not None else None,
        )
        self.cycles[event.stream_id] = call  # type: ignore[assignment]
        task = self.loop.create_task(call.run(self.on_response_complete))
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
