"""HTTP/2 response bodies framed by inferd itself, under the client's flow control.

zttp copies a body handed to its ``send_data`` more than once (a 4 MiB answer cost ~10 ms of CPU
there, more than the rest of the call), so inferd writes its own DATA frames: a 9-byte header
and a ``memoryview`` of the body per frame, as large as the client's SETTINGS_MAX_FRAME_SIZE
allows (gRPC clients take 4 MiB), written with the loop turn's other writes (uvloop sends the
list with one ``writev``; the body is never copied in Python). Everything else on the connection
(headers, trailers, resets, SETTINGS and PING acks, the receive side's WINDOW_UPDATEs) is still
zttp's, which therefore never sends DATA: its own send windows go unused, and this module keeps
the client's instead: the connection's and each stream's window, SETTINGS_INITIAL_WINDOW_SIZE
(and its changes, which move every open stream's window, RFC 9113 6.9.2) and the
WINDOW_UPDATEs the protocol hands it. What the windows do not admit yet waits, per stream, in
order; a stream's end (its trailers, through zttp) waits until its body went out (:meth:`after`).
It also counts the DATA frames each window has not seen answered: a WINDOW_UPDATE that gives
back what one of them took is the client's answer (gRPC clients send one for the connection and
one for the stream per DATA frame they read, thousands a second on a busy stream), which the
protocol does not count against its control-frame allowance (:meth:`DataSender.window_update`).

The receive side: zttp advertises HTTP/2's default windows (64 KiB) and grants more as it parses
(WINDOW_UPDATE every 32 KiB), which paced a large request to one round trip through the event
loop per 32 KiB. :func:`receive_windows` is a second SETTINGS frame and a connection
WINDOW_UPDATE the protocol sends after zttp's preface, opening :data:`RECEIVE_STREAM_WINDOW` per
stream and :data:`RECEIVE_CONNECTION_WINDOW` per connection. zttp keeps granting what it parses,
so the client's windows stay that wide; zttp does not police the receive window, and the
connection's memory stays bounded the way it was: a stream's unread body past the high-water
mark stops the protocol reading the socket (:mod:`inferd.serving.h2`).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable

#: RFC 9113's defaults, until the client's SETTINGS say otherwise.
DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
_INITIAL_WINDOW_SIZE = 0x4
_MAX_FRAME_SIZE = 0x5
_MAX_WINDOW = (1 << 31) - 1
#: What a client may send on one stream, and on the connection, before inferd's next WINDOW_UPDATE.
RECEIVE_STREAM_WINDOW = 8 << 20
RECEIVE_CONNECTION_WINDOW = 32 << 20
#: The largest frame a client may send (SETTINGS_MAX_FRAME_SIZE; zttp advertises HTTP/2's 16 KiB):
#: gRPC clients' and Triton's 4 MiB. A 16 MiB request is 4 DATA frames, not 1,024, for the
#: client to write and for :mod:`inferd.serving.h2_receive` to cut out.
RECEIVE_MAX_FRAME = 4 << 20
#: Bodies up to this size are joined into one frame's payload (one small copy beats many small writes).
JOIN_BELOW = 64 << 10
_FRAME = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id
_SETTING = struct.Struct(">HI")

Body = bytes | bytearray | memoryview
Write = Callable[[bytes | memoryview], None]


def frame_header(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    """An HTTP/2 frame's 9-byte header."""
    return _FRAME.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id)


def receive_windows(
    stream_window: int = RECEIVE_STREAM_WINDOW,
    connection_window: int = RECEIVE_CONNECTION_WINDOW,
    max_frame: int = RECEIVE_MAX_FRAME,
) -> bytes:
    """SETTINGS (INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE) and a connection WINDOW_UPDATE that widen
    what the client may send before the server's next WINDOW_UPDATE, and in one frame, from
    HTTP/2's defaults (64 KiB, 16 KiB)."""
    settings = _SETTING.pack(_INITIAL_WINDOW_SIZE, stream_window) + _SETTING.pack(_MAX_FRAME_SIZE, max_frame)
    increment = (connection_window - DEFAULT_WINDOW).to_bytes(4, "big")
    return frame_header(len(settings), 0x4, 0, 0) + settings + frame_header(4, 0x8, 0, 0) + increment


class _Outgoing:
    """One stream's send window, the body bytes its window has not admitted yet, and what runs
    once they are sent."""

    __slots__ = ("window", "parts", "queued", "then", "unanswered")

    def __init__(self, window: int) -> None:
        self.window = window
        #: DATA frames sent on the stream that no WINDOW_UPDATE of the stream answered yet.
        self.unanswered = 0
        self.parts: deque[memoryview] = deque()
        self.queued = 0
        self.then: list[Callable[[], None]] = []


class DataSender:
    """A connection's DATA frames: the client's flow-control windows, and the bodies waiting for them."""

    __slots__ = ("_write", "window", "initial", "max_frame", "_streams", "_waiting", "unanswered")

    def __init__(self, write: Write) -> None:
        self._write = write
        #: The connection's send window.
        self.window = DEFAULT_WINDOW
        #: The client's SETTINGS_INITIAL_WINDOW_SIZE: a new stream's send window.
        self.initial = DEFAULT_WINDOW
        #: The client's SETTINGS_MAX_FRAME_SIZE.
        self.max_frame = DEFAULT_MAX_FRAME
        self._streams: dict[int, _Outgoing] = {}
        #: Streams with bytes waiting for a window, in the order they began to wait.
        self._waiting: dict[int, _Outgoing] = {}
        #: DATA frames sent that no WINDOW_UPDATE of the connection answered yet.
        self.unanswered = 0

    # what the client says

    def settings(self, params: Iterable[tuple[int, int]]) -> None:
        """The client's SETTINGS (zttp's ``Settings`` event; an ack has none)."""
        for key, value in params:
            if key == _INITIAL_WINDOW_SIZE:
                delta, self.initial = value - self.initial, value
                for out in self._streams.values():
                    out.window += delta
            elif key == _MAX_FRAME_SIZE:
                self.max_frame = value
        self._resume()

    def window_update(self, stream_id: int, increment: int) -> bool:
        """The client's WINDOW_UPDATE (increment > 0; a window past 2^31 - 1 is held there).
        True: it answers a DATA frame sent on its window (one answer per frame), as clients do;
        False: it is one more than the server's own DATA asked for (or its stream is gone)."""
        if stream_id == 0:
            self.window = min(self.window + increment, _MAX_WINDOW)
            answers = self.unanswered > 0
            self.unanswered -= answers
        else:
            out = self._streams.get(stream_id)
            if out is None:
                return False
            out.window = min(out.window + increment, _MAX_WINDOW)
            answers = out.unanswered > 0
            out.unanswered -= answers
        if self._waiting:
            self._resume()
        return answers

    # streams

    def open(self, stream_id: int) -> None:
        """A new stream: its window starts at the client's initial window size."""
        self._streams[stream_id] = _Outgoing(self.initial)

    def close(self, stream_id: int) -> None:
        """The stream ended (or was reset): forget its window; bytes still waiting are dropped."""
        self._streams.pop(stream_id, None)
        self._waiting.pop(stream_id, None)

    def pending(self, stream_id: int) -> int:
        """Body bytes of the stream waiting for the client's window."""
        out = self._streams.get(stream_id)
        return 0 if out is None else out.queued

    def send(self, stream_id: int, parts: Iterable[Body]) -> None:
        """Queue ``parts`` as the stream's next body bytes and send what the windows admit."""
        out = self._streams.get(stream_id)
        if out is None:
            out = self._streams[stream_id] = _Outgoing(self.initial)
        parts = parts if isinstance(parts, list | tuple) else list(parts)
        size = 0
        for part in parts:
            size += len(part) if type(part) is bytes else memoryview(part).nbytes
        if not size:
            return
        if size <= JOIN_BELOW and not out.queued and size <= min(self.window, out.window, self.max_frame):
            self._write(b"".join([frame_header(size, 0x0, 0, stream_id), *parts]))  # the usual small answer
            self.window -= size
            out.window -= size
            self.unanswered += 1
            out.unanswered += 1
            return
        views = [view for view in map(_bytes_view, parts) if view.nbytes]
        if size <= JOIN_BELOW and len(views) > 1:
            views = [memoryview(b"".join(views))]
        out.parts.extend(views)
        out.queued += size
        if stream_id not in self._waiting:
            self._pump(stream_id, out)

    def after(self, stream_id: int, then: Callable[[], None]) -> None:
        """Run ``then`` once the stream's body went out: now, if nothing waits (or the stream is gone)."""
        out = self._streams.get(stream_id)
        if out is None or not out.queued:
            then()
        else:
            out.then.append(then)

    def _resume(self) -> None:
        """Send what the windows now admit of the waiting streams, oldest first."""
        for stream_id, out in list(self._waiting.items()):
            if self.window <= 0:
                return
            del self._waiting[stream_id]
            self._pump(stream_id, out)

    def _pump(self, stream_id: int, out: _Outgoing) -> None:
        write = self._write
        parts = out.parts
        while out.queued:
            size = min(out.queued, self.window, out.window, self.max_frame)
            if size <= 0:
                self._waiting[stream_id] = out
                return
            write(frame_header(size, 0x0, 0, stream_id))
            left = size
            while left:
                head = parts[0]
                if head.nbytes <= left:
                    parts.popleft()
                    write(head)
                    left -= head.nbytes
                else:
                    write(head[:left])
                    parts[0] = head[left:]
                    left = 0
            self.window -= size
            out.window -= size
            out.queued -= size
            self.unanswered += 1
            out.unanswered += 1
        then, out.then = out.then, []
        for call in then:
            call()


def _bytes_view(part: Body) -> memoryview:
    view = memoryview(part)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view
