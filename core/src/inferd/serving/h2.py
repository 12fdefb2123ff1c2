"""inferd's HTTP/2 protocol: an ``asyncio.Protocol`` that drives zttp's sans-IO connection itself.

Bytes read are fed to zttp's ``H2Connection``; its events go to the stream they name: a new
stream's request to a unary route (:mod:`inferd.serving.h2_stream`, no ASGI) or to the ASGI app
(:class:`~inferd.serving.h2_stream.AsgiStream`); its bytes to send are written through one
:class:`~inferd.serving.writes.HeldWrites` per connection (gathered, one send per loop turn). What is
used of zttp: :mod:`inferd.serving.internals`.

zttp 0.0.35's connection answers its 4097th stream with GOAWAY ENHANCE_YOUR_CALM ("HTTP/2 flood
detected") and drops it, failing the calls in flight on it; the count is in the sans-IO connection
(streams closed still count) and has no setting. So after :data:`STREAMS_PER_CONNECTION` streams
the server sends a graceful GOAWAY (NO_ERROR, naming the last stream it takes), answers the
streams it took, and leaves the closing to the client (gRPC clients close a connection that went
away once its calls end), closing it itself once it is idle; a stream the client opened in
between is refused (REFUSED_STREAM), which gRPC clients retry on their new connection.

A peer's cost is bounded as nghttp2 and grpc bound it: a connection is not read while what the
server wrote to it is unsent past the transport's high-water mark (a peer that sends PINGs or
SETTINGS, which zttp acknowledges, or calls, without reading the answers, cannot make the server
buffer more), nor while a stream holds a body over its ``high_water`` mark (64 KiB; 4 MiB for a unary
call, which takes its whole body anyway) that its call has not taken; and control frames (SETTINGS, PING, WINDOW_UPDATE, RST_STREAM) beyond a budget
(:data:`CONTROL_FRAME_BURST`, refilled at :data:`CONTROL_FRAMES_PER_SECOND`) close the connection
with GOAWAY ENHANCE_YOUR_CALM (CVE-2019-9512, -9515 and kin). A WINDOW_UPDATE that answers a DATA
frame the server sent (one per frame on the connection, one on the frame's stream) is the client
keeping up with the server's own answers and is not counted: a gRPC client reading a stream of
messages sends two per message, more than the refill on a fast stream. zttp itself bounds a request's
header list (it advertises and enforces SETTINGS_MAX_HEADER_LIST_SIZE 65,536: a larger header
block is answered GOAWAY ENHANCE_YOUR_CALM), refuses a connection's 4097th stream (rapid reset
too) and ignores empty DATA frames without handing them to Python.

zttp refuses a stream whose headers break RFC 9113 8.2 (it queues RST_STREAM PROTOCOL_ERROR), a
metadata value that begins or ends with a space or tab among them (8.2.1), and has no setting to
relax that; grpcio and Triton accept and keep such values. The reset is replaced by a trailers-only
gRPC answer, INVALID_ARGUMENT with :data:`REFUSED_HEADERS` (the client learns why and what to do),
and the refusal is logged once per connection; ``--grpc-transport grpcio`` serves such clients.

Graceful shutdown (:meth:`Runner.stop <inferd.serving.runner.Runner.stop>` calls :meth:`GrpcH2Protocol.shutdown`): an idle
connection gets GOAWAY and closes; on a busy one new streams are answered HTTP 503 (gRPC clients
read UNAVAILABLE) and it closes once its last call ends.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import unquote

import zttp

from inferd.serving.flow import ReadingFlow
from inferd.serving.h2_receive import MIN_READ_BYTES, READ_BYTES, BodyBuffers, FrameCutter, ReadArenas
from inferd.serving.h2_send import RECEIVE_MAX_FRAME, DataSender, receive_windows
from inferd.serving.h2_stream import AsgiApp, AsgiStream, Headers, UnaryRoute, UnaryStream
from inferd.serving.writes import HeldWrites

#: Streams a connection takes before it is rotated (zttp's cap is 4096; leave room for races).
STREAMS_PER_CONNECTION = 4000
#: How often a rotated connection is checked, to be closed once idle.
IDLE_CHECK_SECONDS = 1.0
_PROTOCOL_ERROR = 0x1
_REFUSED_STREAM = 0x7
_ENHANCE_YOUR_CALM = 0xB
#: Control frames a connection may send at once; the allowance refills at the rate below. gRPC
#: clients send a few a second (BDP pings, SETTINGS); a flood sends millions. A WINDOW_UPDATE that
#: answers a DATA frame the server sent is not counted (gRPC clients send two per message read).
CONTROL_FRAME_BURST = 10_000
CONTROL_FRAMES_PER_SECOND = 5_000
#: How long a connection closed for a flood may take to send its GOAWAY before it is dropped
#: (a peer that does not read would hold it forever).
CLOSE_GRACE_SECONDS = 2.0
_CONTROL = (zttp.Settings, zttp.Ping, zttp.WindowUpdate)
_UNAVAILABLE = [(b"content-type", b"text/plain; charset=utf-8")]

log = logging.getLogger(__name__)
Stream = UnaryStream | AsgiStream
GRPC_INVALID_ARGUMENT = 3
#: What a gRPC client is told when the HTTP/2 parser refused its call's headers.
REFUSED_HEADERS = (
    "the request's headers break RFC 9113 8.2 and this server's HTTP/2 transport (--grpc-transport h2) "
    "cannot accept them: most often a metadata value that begins or ends with a space or tab; strip it, "
    "or serve with --grpc-transport grpcio, which accepts such values as Triton does"
)
_RST_STREAM = 0x3
_HEADERS = 0x1
_END_STREAM_END_HEADERS = 0x5


def without_reset(data: bytes, stream_id: int) -> bytes | None:
    """``data`` (whole HTTP/2 frames) less the RST_STREAM PROTOCOL_ERROR frame of ``stream_id``;
    None when it holds none (the peer reset the stream, not the parser)."""
    view = memoryview(data)
    offset = 0
    while offset + 9 <= len(data):
        length = int.from_bytes(view[offset : offset + 3], "big")
        end = offset + 9 + length
        if (
            data[offset + 3] == _RST_STREAM
            and length == 4
            and int.from_bytes(view[offset + 5 : offset + 9], "big") & 0x7FFFFFFF == stream_id
            and int.from_bytes(view[offset + 9 : end], "big") == _PROTOCOL_ERROR
        ):
            return bytes(view[:offset]) + bytes(view[end:])
        offset = end
    return None


def _hpack_int(value: int, prefix_bits: int, flags: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([flags | value])
    out = bytearray([flags | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal field without indexing, new name: neither side's dynamic table changes."""
    return b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value


def grpc_error_headers(stream_id: int, status: int, message: str) -> bytes:
    """A HEADERS frame (END_STREAM, END_HEADERS) answering ``stream_id`` with a trailers-only gRPC
    error: ``:status 200``, ``content-type``, ``grpc-status`` and the percent-encoded ``grpc-message``."""
    encoded = "".join(c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode()) for c in message)
    block = (
        b"\x88"  # :status 200, static table entry 8
        + _literal(b"content-type", b"application/grpc")
        + _literal(b"grpc-status", str(status).encode())
        + _literal(b"grpc-message", encoded.encode())
    )
    head = len(block).to_bytes(3, "big") + bytes([_HEADERS, _END_STREAM_END_HEADERS]) + stream_id.to_bytes(4, "big")
    return head + block


@dataclass(frozen=True)
class Served:
    """What a server's connections serve."""

    #: The ASGI app that answers what no unary route takes.
    app: AsgiApp
    #: The requests answered without ASGI, by raw path (:mod:`inferd.serving.h2_stream`).
    unary: Mapping[bytes, UnaryRoute] | None
    #: An idle connection is closed (GOAWAY) after this long.
    keep_alive_secs: float
    #: Where the connections join large request bodies.
    buffers: BodyBuffers = field(default_factory=BodyBuffers)
    #: What the connections read large request bodies into.
    arenas: ReadArenas = field(default_factory=ReadArenas)
    #: What the connections read everything else into, one read at a time (the loop's reads follow
    #: one another): nothing keeps a view of it past the read (:meth:`GrpcH2Protocol._deliver`).
    scratch: memoryview = field(default_factory=lambda: memoryview(bytearray(READ_BYTES)))


class GrpcH2Protocol(asyncio.BufferedProtocol):
    """One HTTP/2 connection (prior knowledge, or ALPN ``h2``); rotated after 4000 calls.

    The socket is read into memory of the server's (``get_buffer``), not into a new ``bytes`` per
    read: the server's scratch buffer, reused by every read, until a call on the connection
    receives DATA frames large enough to be cut out for it (:mod:`inferd.serving.h2_receive`);
    from then on until the connection has no call, into an arena
    (:class:`~inferd.serving.h2_receive.ReadArenas`), whose payloads are views of what the kernel
    wrote, taken without a copy (back to the arena's start whenever nothing holds a view of it).
    A payload read into the scratch buffer is copied for its call; idle connections hold no arena.
    Once a unary call's body buffer exists (a gRPC message's length prefix gives its size), the
    rest of each of its DATA payloads is read straight into that buffer: a 16 MiB request in
    gRPC's 4 MiB frames is copied by the kernel only.

    Built by :class:`~inferd.serving.runner.Runner` for each connection it accepts (keyword
    arguments ``server_state``, ``_loop``); what it serves is on the class
    (:func:`protocol_class`).
    """

    streams_per_connection: ClassVar[int] = STREAMS_PER_CONNECTION
    #: What the connections serve (set by :func:`protocol_class`).
    served: ClassVar[Served]

    transport: HeldWrites
    flow: ReadingFlow
    sender: DataSender
    client: tuple[str, int] | None = None

    def __init__(self, server_state: Any, _loop: asyncio.AbstractEventLoop | None = None, **_: Any) -> None:
        self.loop = _loop or asyncio.get_running_loop()
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        #: Every call's task (the server's stop waits for them, cancels them past the grace).
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.conn: zttp.H2Connection = zttp.Connection(zttp.SERVER, protocol=zttp.HTTP2)
        #: Cuts DATA payloads out of what is read before zttp parses the rest (:mod:`inferd.serving.h2_receive`).
        self.cutter = FrameCutter(self._deliver, self._parse, RECEIVE_MAX_FRAME, window=self._window_update)
        #: The streams whose call runs, by id.
        self.streams: dict[int, Stream] = {}
        self.shutdown_requested = False
        self._scheme = "http"
        self._server: tuple[str, int] | None = None
        self._taken = 0
        self._last_stream: int | None = None
        #: The newest stream a request came from; a refusal of a later one is zttp's (:meth:`_refused`).
        self._newest = 0
        self._told_refusal = False
        #: Control frames the peer may still send now, and when that was counted.
        self._allowance = float(CONTROL_FRAME_BURST)
        self._counted_at = 0.0
        #: When the peer last sent something; the idle timer looks at it.
        self._active_at = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        #: The arena the socket is read into (None: none held), where the next read goes in it, and
        #: its references when nothing else holds it (this, get_buffer's local and getrefcount's
        #: argument; one more when the pool keeps it).
        self._arena: bytearray | None = None
        self._arena_at = 0
        self._arena_refs = 0
        #: Whether a call on the connection receives large DATA (the reads then go into an arena).
        self._large = False
        #: Whether the read being handled is in the server's scratch buffer.
        self._in_scratch = False
        #: The stream whose body buffer the read being handled went into (None: none).
        self._direct: UnaryStream | None = None

    # asyncio's side

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvloop's is none
        self.connections.add(self)
        self.flow = ReadingFlow(transport)
        self.transport = HeldWrites(transport)
        self.sender = DataSender(self.transport.write)
        self.client = _address(transport.get_extra_info("peername"))
        self._server = _address(transport.get_extra_info("sockname"))
        if transport.get_extra_info("sslcontext") is not None:
            self._scheme = "https"
        self.conn.initiate_connection()
        self.flush()
        self.transport.write(receive_windows())
        self._active_at = self.loop.time()
        self._idle_timer = self.loop.call_later(self.served.keep_alive_secs, self._idle_check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._arena = None
        for stream in self.streams.values():
            if not stream.response_complete:
                stream.disconnected = True
            stream.message_event.set()
        self.flow.resume_writing()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if exc is None:
            self.transport.close()

    def eof_received(self) -> None:
        pass  # the transport closes; connection_lost follows

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read goes: inside a large DATA payload of a call whose body buffer is
        ready, that buffer (the payload is never copied in Python); else the server's scratch
        buffer; while a call receives large DATA, the rest of the connection's arena (its start
        again when nothing holds a view of it), or a free arena of the server's."""
        self._direct = None  # a read that found nothing (EAGAIN) is not followed by buffer_updated
        stream_id, left = self.cutter.inside()
        if left:  # inside a large DATA payload: into its call's body buffer, if it has one yet
            stream = self.streams.get(stream_id)
            if type(stream) is UnaryStream and not stream.response_complete:
                view = stream.direct_view(left)
                if view is not None:
                    self._direct = stream
                    self._in_scratch = False
                    return view
        if not self._large:
            self._in_scratch = True
            return self.served.scratch
        self._in_scratch = False
        arena = self._arena
        if arena is not None and self._arena_at and sys.getrefcount(arena) == self._arena_refs:
            self._arena_at = 0  # nothing holds what was read into it: read over it
        if arena is None or len(arena) - self._arena_at < MIN_READ_BYTES:
            arena, kept = self.served.arenas.take()
            self._arena = arena
            self._arena_at = 0
            self._arena_refs = 4 if kept else 3
        at = self._arena_at
        return memoryview(arena)[at : at + READ_BYTES]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were read into the buffer :meth:`get_buffer` gave."""
        stream = self._direct
        if stream is not None:  # body bytes, in place: the cutter skips them
            self._direct = None
            stream.took_direct(nbytes)
            self.data_received(b"", nbytes)
            return
        if self._in_scratch:
            try:
                self.data_received(self.served.scratch[:nbytes])
            finally:
                self._in_scratch = False
            return
        arena = self._arena
        assert arena is not None
        at = self._arena_at
        self._arena_at = at + nbytes
        self.data_received(memoryview(arena)[at : at + nbytes])

    def data_received(self, data: bytes | memoryview, skipped: int = 0) -> None:
        """Bytes read (``skipped``: that many DATA payload bytes read straight into a call's body
        buffer instead; the frame they end may end the stream, which zttp then parses)."""
        self._active_at = self.loop.time()
        cutter = self.cutter
        try:
            if skipped:
                cutter.skip(skipped)
            else:
                cutter.feed(data)
            self._parse()
        except zttp.RemoteProtocolError as exc:
            log.warning("%s: invalid HTTP/2 frame received: %s", self.client, exc)
            self.flush()
            self.transport.close()
            return
        self.flush()
        self.transport.write(cutter.window_updates())

    def _parse(self) -> None:
        """Give zttp what the cutter kept for it, and handle the events."""
        data = self.cutter.take_for_zttp()
        if data:
            self.conn.receive_data(data)
            self.handle_events()

    def _deliver(self, stream_id: int, payload: memoryview) -> None:
        """A DATA frame's payload, cut out by the cutter: to its stream."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.response_complete:
            return
        if self._in_scratch:  # the next reads go into an arena; this one is copied out of the scratch buffer
            self._large = True
            if type(stream) is UnaryStream:  # it keeps the payload (an ASGI stream copies it)
                stream.take(bytes(payload))
                if stream.held > stream.high_water:
                    self.flow.pause_reading()
                return
        if stream.take(payload) > stream.high_water:
            self.flow.pause_reading()

    def _window_update(self, stream_id: int, increment: int) -> None:
        """A WINDOW_UPDATE, cut out by the cutter: to the sender's windows; counted against the
        allowance unless it answers a DATA frame the server sent."""
        if not self.sender.window_update(stream_id, increment):
            self._allow()

    def flush(self) -> None:
        """Write what zttp has to send (acks, the preface, DATA released by a WINDOW_UPDATE)."""
        self.transport.write(self.conn.data_to_send())

    # zttp's side

    def handle_events(self) -> None:
        """zttp's events, each to its stream; control frames counted against the allowance."""
        conn = self.conn
        streams = self.streams
        while True:
            event: Any = conn.next_event()  # dispatched on its exact type below (narrowed by hand)
            kind = type(event)
            if kind is zttp.Data:
                stream = streams.get(event.stream_id)
                if stream is None or stream.response_complete:
                    continue
                if stream.take(event.data) > stream.high_water:
                    self.flow.pause_reading()
            elif kind is zttp.Request:
                self.handle_request(event)
            elif kind is zttp.EndOfMessage:
                stream = streams.get(event.stream_id)
                if stream is None or stream.response_complete:
                    continue
                stream.more_body = False
                stream.message_event.set()
            elif kind is zttp.NeedData or kind is zttp.ConnectionClosed:
                return
            elif kind is zttp.WindowUpdate:  # the cutter takes them all (a test cutter may not)
                if not self.sender.window_update(event.stream_id, event.increment) and not self._allow():
                    return
            elif kind in _CONTROL:  # zttp answers them (acks); they only cost here
                if kind is zttp.Settings:  # its ack (zttp's) goes before DATA framed by the new values
                    self.flush()
                    self.sender.settings(event.params)
                if not self._allow():
                    return
            elif kind is zttp.RstStream:
                if event.error_code == _PROTOCOL_ERROR and event.stream_id > self._newest:
                    self._refused(event.stream_id)
                self._reset(event.stream_id)
                if not self._allow():
                    return
            elif kind is zttp.GoAway:
                self.shutdown_requested = True
                if not streams:
                    self._close()

    def handle_request(self, event: zttp.Request) -> None:
        stream_id = event.stream_id
        self._newest = stream_id
        if self._last_stream is not None and stream_id > self._last_stream:
            self.conn.stream(stream_id).reset(_REFUSED_STREAM)
            return
        self._taken += 1
        self.sender.open(stream_id)
        if _declares_length(event.headers):
            self.cutter.whole(stream_id)
        if self.shutdown_requested:
            self._unavailable(stream_id)
        elif not self._start_unary(event):
            self._start_asgi(event)
        if self._taken >= self.streams_per_connection and self._last_stream is None:
            self._last_stream = stream_id
            self.conn.close(0, stream_id)
            self.loop.call_later(IDLE_CHECK_SECONDS, self._close_when_idle)

    def _start_unary(self, event: zttp.Request) -> bool:
        """Answer a request its route takes without ASGI (:mod:`inferd.serving.h2_stream`); False: not one."""
        routes = self.served.unary
        if routes is None:
            return False
        route = routes.get(event.path)
        if route is None:
            return False
        handler = route(event.method, _header_list(event.headers))
        if handler is None:
            return False
        stream = UnaryStream(
            self.conn, event, self.transport, self.flow, self.resume_reading_if_idle, self.sender, self.served.buffers
        )
        self.streams[event.stream_id] = stream
        self._run(stream.run(handler, self.on_response_complete, self.loop))
        return True

    def _start_asgi(self, event: zttp.Request) -> None:
        if not event.target.isascii():
            self.conn.stream(event.stream_id).reset(_PROTOCOL_ERROR)  # RFC 9113 8.1.1
            return
        raw_path = event.path
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "2",
            "server": self._server,
            "client": self.client,
            "scheme": self._scheme,
            "method": event.method.decode("ascii"),
            "root_path": "",
            "path": unquote(raw_path.decode("ascii")),
            "raw_path": raw_path,
            "query_string": event.query,
            "headers": _header_list(event.headers),
            "extensions": {"http.response.trailers": {}},
        }
        stream = AsgiStream(
            scope, self.conn, event, self.transport, self.flow, self.resume_reading_if_idle, self.sender
        )
        self.streams[event.stream_id] = stream
        self._run(stream.run(self.served.app, self.on_response_complete))

    def _run(self, call: Any) -> None:
        task = self.loop.create_task(call)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def _unavailable(self, stream_id: int) -> None:
        """A stream opened after shutdown began: HTTP 503 (gRPC clients read UNAVAILABLE)."""
        stream = self.conn.stream(stream_id)
        stream.send_response(503, _UNAVAILABLE)
        self.flush()
        self.sender.send(stream_id, (b"Service Unavailable",))
        self.sender.after(stream_id, lambda: self._end_unavailable(stream_id))

    def _end_unavailable(self, stream_id: int) -> None:
        self.sender.close(stream_id)
        if not self.transport.is_closing():
            self.conn.stream(stream_id).end_message()
            self.flush()

    def _reset(self, stream_id: int) -> None:
        """The client reset a stream: its call, if it still runs, learns it went away."""
        self.sender.close(stream_id)
        self.cutter.forget(stream_id)
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        if not stream.response_complete:
            stream.disconnected = True
            stream.message_event.set()
        self._stream_closed()

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
        the reset it queued is replaced by a gRPC answer that says why (INVALID_ARGUMENT, trailers
        only), and the refusal is logged once per connection."""
        self._newest = stream_id
        pending = self.conn.data_to_send()
        kept = without_reset(pending, stream_id)
        if kept is not None:
            pending = kept + grpc_error_headers(stream_id, GRPC_INVALID_ARGUMENT, REFUSED_HEADERS)
        self.transport.write(pending)
        if self._told_refusal:
            return
        self._told_refusal = True
        log.warning(
            "%s: HTTP/2 stream %d refused (answered INVALID_ARGUMENT): its headers break RFC 9113 8.2, most often "
            "a metadata value that begins or ends with a space or tab, which --grpc-transport grpcio accepts",
            self.client,
            stream_id,
        )

    # the streams' side

    def resume_reading_if_idle(self) -> None:
        """Read again, unless a stream still holds a body over the high-water mark its call has not taken."""
        for stream in self.streams.values():
            if stream.held > stream.high_water:
                return
        self.flow.resume_reading()

    def on_response_complete(self, stream_id: int) -> None:
        """A stream's call ended (answered, failed or gone)."""
        self.server_state.total_requests += 1
        self.cutter.forget(stream_id)
        if self.streams.pop(stream_id, None) is not None:
            self._stream_closed()
        if not self.streams:  # an idle connection holds no arena
            self._arena = None
            self._large = False

    def _stream_closed(self) -> None:
        if self.transport.is_closing():
            return
        self.resume_reading_if_idle()
        if not self.streams:
            self._active_at = self.loop.time()
            if self.shutdown_requested:
                self._close()

    # closing

    def shutdown(self) -> None:
        """Graceful shutdown (the server's stop): close now when idle; else refuse new
        streams (503) and close once the last call ends."""
        self.shutdown_requested = True
        if not self.streams:
            self._close()

    def _close(self) -> None:
        """GOAWAY, then close once it is sent."""
        if self.transport.is_closing():
            return
        self.conn.close()
        self.flush()
        self.transport.close()

    def _idle_check(self) -> None:
        """Close a connection idle for ``keep_alive_secs``; otherwise look again when it could be."""
        if self.transport.is_closing():
            return
        keep_alive = self.served.keep_alive_secs
        idle = self.loop.time() - self._active_at
        if not self.streams and idle >= keep_alive:
            self._close()
            return
        self._idle_timer = self.loop.call_later(max(keep_alive - idle, IDLE_CHECK_SECONDS), self._idle_check)

    def _close_when_idle(self) -> None:
        if self.transport.is_closing():
            return
        if self.streams:
            self.loop.call_later(IDLE_CHECK_SECONDS, self._close_when_idle)
            return
        self._close()


def _address(name: Any) -> tuple[str, int] | None:
    """A socket's (host, port), as ASGI's ``client`` and ``server`` (None: not an IP socket)."""
    if isinstance(name, tuple | list) and len(name) >= 2:
        return str(name[0]), int(name[1])
    return None


def _declares_length(headers: zttp.HeaderBlock | Headers) -> bool:
    """Whether a request has a ``content-length`` header (gRPC clients send none)."""
    if isinstance(headers, zttp.HeaderBlock):
        return headers.get(b"content-length") is not None
    for name, _ in headers:  # noqa: SIM110 - request path: cheaper than any() over a generator; HTTP/2 header names are lower case (zttp refuses others)
        if name == b"content-length":
            return True
    return False


def _header_list(headers: zttp.HeaderBlock | Headers) -> Headers:
    """A request's headers as pairs with lower-case names (as ASGI gives them)."""
    if isinstance(headers, zttp.HeaderBlock):
        return headers.to_list(lowercase_names=True)
    return [(name.lower(), value) for name, value in headers]


def protocol_class(
    app: AsgiApp, unary: Mapping[bytes, UnaryRoute] | None, keep_alive_secs: float
) -> type[GrpcH2Protocol]:
    """:class:`GrpcH2Protocol` serving ``app``, answering ``unary``'s requests without ASGI."""
    return type("GrpcH2Protocol", (GrpcH2Protocol,), {"served": Served(app, unary, keep_alive_secs)})
