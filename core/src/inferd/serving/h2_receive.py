"""HTTP/2 request bodies read by inferd itself: DATA payloads cut out of the byte stream before zttp.

zttp takes no frame over HTTP/2's default 16 KiB (and has no setting for it); the protocol
advertises 4 MiB, as gRPC clients and Triton do, and a frame over 16 KiB that is not cut out (a
large header block, padded DATA, DATA of a stream zttp parses whole) is given to zttp re-framed
(:meth:`FrameCutter._big_end`).

zttp parses every frame it is given and copies each DATA frame's payload into a new ``bytes``
(a 16 MiB request is 1,024 frames of 16 KiB: a copy and a Python event each, a fifth of the
event loop's time on large calls). :class:`FrameCutter` reads the frame headers of the client's
byte stream first: the payload of a DATA frame (unpadded, up to the 4 MiB the protocol advertises)
goes to the protocol's ``deliver`` as a ``memoryview`` of the bytes read from the socket, never
copied; zttp still sees the frame, emptied (its 9-byte header with length 0 and the same flags),
so the stream's state stays zttp's: END_STREAM still ends the request (``EndOfMessage``), a DATA
frame on a stream that is not open is still zttp's error to answer. Every other frame (HEADERS,
CONTINUATION, SETTINGS, PING, RST_STREAM, GOAWAY, a padded DATA frame, one over the advertised
size) and the client's preface go to zttp as they came (re-framed when over 16 KiB), in order.

The client's WINDOW_UPDATE frames are cut out too (when the cutter is given ``window``) and
handed to the protocol as (stream id, increment): inferd frames its DATA itself
(:mod:`inferd.serving.h2_send`), so zttp never spends its send windows, and fed every
WINDOW_UPDATE it added them up until one passed 2^31 - 1, closing the connection (GOAWAY
FLOW_CONTROL_ERROR) after 2 GiB of answers on it. A WINDOW_UPDATE whose length is not 4 or
whose increment is 0 still goes to zttp, which refuses it (RFC 9113 6.9).

zttp grants flow-control window for the DATA bytes it parses; it sees none of the payloads cut out
here, so the cutter grants them itself (:meth:`FrameCutter.window_updates`): a WINDOW_UPDATE for
the connection once a quarter of its receive window was read, and for a stream once a quarter of
the stream's was (none for a stream whose request ended). The windows are the ones
:func:`~inferd.serving.h2_send.receive_windows` opens; bytes are granted as they are read, as zttp
did, and memory stays bounded the way it was (a stream holding more than the high-water mark
stops the protocol reading the socket).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Sequence

from inferd.serving.h2_send import DEFAULT_MAX_FRAME, RECEIVE_CONNECTION_WINDOW, RECEIVE_STREAM_WINDOW, frame_header

#: The client connection preface (RFC 9113 3.4), passed to zttp before any frame.
PREFACE_BYTES = 24
HEADER_BYTES = 9
_DATA = 0x0
_HEADERS = 0x1
_WINDOW_UPDATE = 0x8
_CONTINUATION = 0x9
_END_STREAM = 0x1
_END_HEADERS = 0x4
_PADDED = 0x8
_PRIORITY = 0x20
_HEADER = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id

#: DATA frames from this size up are cut out; smaller ones go to zttp (with the frames around them).
CUT_FROM = 8 << 10
#: A DATA payload for the protocol: (stream id, the payload's bytes).
Deliver = Callable[[int, memoryview], None]
#: Gives zttp what the cutter kept for it (:meth:`FrameCutter.take_for_zttp`) and handles its events.
Parse = Callable[[], None]
#: A client's WINDOW_UPDATE for the protocol: (stream id, 0 for the connection; the increment).
Window = Callable[[int, int], None]


class FrameCutter:
    """One connection's received bytes, cut at frame boundaries: DATA payloads to ``deliver``,
    the rest (emptied DATA frames included) kept for zttp in :attr:`for_zttp`.

    ``deliver`` is called in the order the payloads came. Before a DATA frame is looked at,
    ``parse`` gives zttp what it holds when :attr:`holds_frames` (a HEADERS frame that opens the
    stream, say), so zttp's events and the payloads stay in the order the client sent them, and a
    stream marked :meth:`whole` by then has its DATA parsed by zttp: a request that declares its
    ``content-length``, which zttp checks against the DATA it sees (RFC 9113 8.1.1).
    """

    __slots__ = (
        "deliver",
        "parse",
        "max_frame",
        "for_zttp",
        "holds_frames",
        "_preface",
        "_head",
        "_left",
        "_stream",
        "_flags",
        "_length",
        "_next",
        "_connection_read",
        "_stream_read",
        "_connection_step",
        "_stream_step",
        "_whole",
        "window",
        "_update",
        "_big",
    )

    def __init__(
        self,
        deliver: Deliver,
        parse: Parse,
        max_frame: int = DEFAULT_MAX_FRAME,
        stream_window: int = RECEIVE_STREAM_WINDOW,
        connection_window: int = RECEIVE_CONNECTION_WINDOW,
        window: Window | None = None,
    ) -> None:
        self.deliver = deliver
        self.parse = parse
        #: Where the client's WINDOW_UPDATEs go (None: to zttp, as they came).
        self.window = window
        #: The largest frame taken (the SETTINGS_MAX_FRAME_SIZE advertised: the protocol's, 4 MiB,
        #: after zttp's 16 KiB: :func:`~inferd.serving.h2_send.receive_windows`); a larger one goes to zttp,
        #: which refuses it. zttp takes no frame over 16 KiB: a larger one that is not cut out here
        #: is given to it cut in frames of 16 KiB (:meth:`_big_end`).
        self.max_frame = max_frame
        #: Bytes for zttp, in order, not yet given to it.
        self.for_zttp: list[bytes | memoryview] = []
        #: Whether :attr:`for_zttp` holds more than emptied DATA frames.
        self.holds_frames = False
        self._preface = PREFACE_BYTES
        self._head = bytearray()  # a frame header cut by the end of a read
        self._left = 0  # payload bytes of the current frame still to come
        self._stream = 0  # the current frame's stream when it is a DATA frame cut out here; else 0
        self._flags = 0
        self._length = 0
        self._next = 0  # the stream of an eligible DATA frame, until it is cut out
        self._connection_read = 0  # DATA bytes read since the connection's last WINDOW_UPDATE
        self._stream_read: dict[int, int] = {}  # by stream, since its last WINDOW_UPDATE
        self._connection_step = connection_window // 4
        self._stream_step = stream_window // 4
        self._whole: set[int] = set()  # streams whose DATA zttp parses
        self._update: bytearray | None = None  # a WINDOW_UPDATE being cut out: its header, then its payload
        self._big: bytearray | None = None  # a frame over zttp's 16 KiB for zttp: its header, then its payload

    def feed(self, data: bytes | memoryview) -> None:
        """Cut one read of the socket. What zttp keeps of it goes in runs (views of the read): a read
        with nothing cut out is handed to zttp as it came."""
        end = len(data)
        if end < CUT_FROM and not (self._left or self._head or self._preface):
            whole = _whole_frames(data, end, self.window is not None)
            if whole == _NOTHING_TO_CUT:
                self._keep(data)  # a small read of whole frames (a small call): nothing in it to cut
                return
            if whole == _UPDATES_TO_CUT:
                self._cut_updates(data, end)  # a small call's, with the updates for earlier answers
                return
        view = memoryview(data)
        pos = run = 0  # run: where the bytes kept for zttp since the last cut begin
        if self._preface:
            pos = min(self._preface, end)
            self._preface -= pos
        while pos < end:
            left = self._left
            if left:
                take = min(left, end - pos)
                if self._stream:
                    self.deliver(self._stream, view[pos : pos + take])
                    run = pos + take
                elif self._update is not None:
                    self._update += view[pos : pos + take]
                    run = pos + take
                elif self._big is not None:
                    self._big += view[pos : pos + take]
                    run = pos + take
                pos += take
                self._left = left - take
                if self._left == 0:
                    if self._stream:
                        self._data_end()
                    elif self._update is not None:
                        self._window_end()
                    elif self._big is not None:
                        self._big_end()
                continue
            head = self._head
            if head or end - pos < HEADER_BYTES:  # a header cut by the end of a read
                if run < pos:
                    self._keep(view[run:pos])
                need = HEADER_BYTES - len(head)
                head += view[pos : pos + need]
                pos = run = pos + min(need, end - pos)
                if len(head) < HEADER_BYTES:
                    return
                header = bytes(head)
                head.clear()
                if not (self._eligible(header) and self._cut()):
                    self._keep(header)
                continue
            start = pos
            pos += HEADER_BYTES
            if self._eligible(view[start:pos]):
                if run < start:
                    self._keep(view[run:start])
                run = pos if self._cut() else start
        if run < end:
            self._keep(view[run:end])

    def _eligible(self, header: bytes | memoryview) -> bool:
        """A frame header: whether it may be cut out, a DATA frame from :data:`CUT_FROM` bytes on
        (zttp's copy of a smaller one costs less than cutting it), unpadded, within the frame size."""
        high, low, kind, flags, stream_id = _HEADER.unpack(header)
        length = self._left = high << 16 | low
        self._stream = 0
        if kind == _WINDOW_UPDATE and length == 4 and self.window is not None:
            self._update = bytearray(header)
            return True
        if length > DEFAULT_MAX_FRAME and length <= self.max_frame and (kind != _DATA or flags & _PADDED):
            self._big = bytearray(header)  # re-framed for zttp once whole
            return True
        if kind != _DATA or length < CUT_FROM or flags & _PADDED or length > self.max_frame:
            return False
        self._flags = flags
        self._length = length
        self._next = stream_id & 0x7FFFFFFF
        return bool(self._next)

    def _cut(self) -> bool:
        """Cut the eligible DATA frame out unless its stream is marked :meth:`whole`; zttp first
        parses what it holds (the HEADERS that open the stream, say)."""
        if self.holds_frames:
            self.parse()
        if self._update is not None or self._big is not None:
            return True
        if self._next in self._whole:
            if self._length > DEFAULT_MAX_FRAME:  # zttp parses it, re-framed once whole
                self._big = bytearray(
                    _HEADER.pack(self._length >> 16, self._length & 0xFFFF, _DATA, self._flags, self._next)
                )
                return True
            return False
        self._stream = self._next
        return True

    def _data_end(self) -> None:
        """A DATA frame cut out here ended: zttp gets it emptied; its bytes count toward the windows."""
        stream_id, length = self._stream, self._length
        self._stream = 0
        self.for_zttp.append(frame_header(0, _DATA, self._flags & _END_STREAM, stream_id))
        self._connection_read += length
        if self._flags & _END_STREAM:
            self._stream_read.pop(stream_id, None)
        elif length:
            self._stream_read[stream_id] = self._stream_read.get(stream_id, 0) + length

    def _cut_updates(self, data: bytes | memoryview, end: int) -> None:
        """A small read of whole frames, some of them WINDOW_UPDATEs: those to the protocol, the
        rest kept for zttp (parsed first when the update is a stream's, which they may open)."""
        window = self.window
        assert window is not None
        pos = run = 0
        while pos < end:
            length = data[pos] << 16 | data[pos + 1] << 8 | data[pos + 2]
            if data[pos + 3] == _WINDOW_UPDATE and length == 4:
                increment = int.from_bytes(data[pos + 9 : pos + 13], "big") & 0x7FFFFFFF
                if increment:
                    if run < pos:
                        self._keep(data[run:pos])
                    stream_id = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                    if stream_id and self.holds_frames:
                        self.parse()
                    window(stream_id, increment)
                    run = pos + 13
            pos += HEADER_BYTES + length
        if run < end:
            self._keep(data[run:end])

    def _window_end(self) -> None:
        """A WINDOW_UPDATE cut out here ended: to the protocol; one of increment 0 (an error) to zttp."""
        frame, self._update = self._update, None
        assert frame is not None and self.window is not None
        increment = int.from_bytes(frame[HEADER_BYTES:], "big") & 0x7FFFFFFF
        if increment:
            self.window(int.from_bytes(frame[5:HEADER_BYTES], "big") & 0x7FFFFFFF, increment)
        else:
            self._keep(bytes(frame))

    def inside(self) -> tuple[int, int]:
        """(stream id, payload bytes left) while the cutter is inside a DATA payload it cuts out;
        (0, 0) otherwise. The protocol may then read up to that many bytes elsewhere (:meth:`skip`)."""
        if self._stream and self._left:
            return self._stream, self._left
        return 0, 0

    def skip(self, size: int) -> None:
        """``size`` bytes of the current DATA payload (:meth:`inside`) were read by the protocol itself."""
        self._left -= size
        if not self._left:
            self._data_end()

    def _big_end(self) -> None:
        """A frame over zttp's 16 KiB ended: to zttp as frames of 16 KiB. DATA loses its padding
        (granted here as the cut-out DATA is), HEADERS its padding and the rest of its header block
        goes in CONTINUATION frames; a frame of a type RFC 9113 does not define is dropped (6, 5.5:
        ignored); any other (SETTINGS, GOAWAY, ...) goes to zttp as it came, which refuses it."""
        frame, self._big = self._big, None
        assert frame is not None
        _, _, kind, flags, stream_id = _HEADER.unpack(frame[:HEADER_BYTES])
        stream_id &= 0x7FFFFFFF
        payload = memoryview(frame)[HEADER_BYTES:]
        if kind > _CONTINUATION:
            return
        if kind not in (_DATA, _HEADERS, _CONTINUATION):
            self._keep(bytes(frame))
            return
        padding = 0
        if kind != _CONTINUATION and flags & _PADDED:
            padding = payload[0] + 1
            if padding > len(payload):  # padding longer than the frame: zttp's error to answer
                self._keep(bytes(frame))
                return
            payload = payload[1 : len(payload) - padding + 1]
            flags &= ~_PADDED
        step = DEFAULT_MAX_FRAME
        pieces = [payload[at : at + step] for at in range(0, len(payload), step)] or [payload]
        out: list[bytes | memoryview] = []
        last = len(pieces) - 1
        for index, piece in enumerate(pieces):
            if kind == _DATA:
                piece_kind, piece_flags = _DATA, flags & _END_STREAM if index == last else 0
            else:  # a header block: the first frame keeps its kind (and PRIORITY), END_HEADERS goes on the last
                piece_kind = kind if index == 0 else _CONTINUATION
                piece_flags = (flags & ~_END_HEADERS if index == 0 else 0) | (
                    flags & _END_HEADERS if index == last else 0
                )
            out.append(frame_header(len(piece), piece_kind, piece_flags, stream_id))
            out.append(piece)
        self._keep(b"".join(out))
        if kind == _DATA and padding:
            self._connection_read += padding
            if not flags & _END_STREAM:
                self._stream_read[stream_id] = self._stream_read.get(stream_id, 0) + padding

    def _keep(self, data: bytes | memoryview) -> None:
        self.for_zttp.append(data)
        self.holds_frames = True

    def take_for_zttp(self) -> bytes | memoryview:
        """What zttp has not been given yet, in one piece (b"": nothing; a read kept whole: its view, uncopied)."""
        held = self.for_zttp
        if not held:
            return b""
        self.for_zttp = []
        self.holds_frames = False
        return held[0] if len(held) == 1 else b"".join(held)

    def whole(self, stream_id: int) -> None:
        """The stream's DATA frames go to zttp whole (its request declares a ``content-length``)."""
        self._whole.add(stream_id)

    def forget(self, stream_id: int) -> None:
        """The stream ended or was reset: it is granted no more window."""
        self._stream_read.pop(stream_id, None)
        self._whole.discard(stream_id)

    def window_updates(self) -> bytes:
        """WINDOW_UPDATE frames granting what was read past a quarter of a window (b"": none due)."""
        if not self._stream_read and self._connection_read < self._connection_step:
            return b""
        out = []
        if self._connection_read >= self._connection_step:
            out.append(_window_update(0, self._connection_read))
            self._connection_read = 0
        step = self._stream_step
        due = [stream_id for stream_id, read in self._stream_read.items() if read >= step]
        for stream_id in due:
            out.append(_window_update(stream_id, self._stream_read.pop(stream_id)))  # noqa: PERF401 - request path: cheaper than a comprehension for the few due
        return b"".join(out)


_NOTHING_TO_CUT, _UPDATES_TO_CUT, _NOT_WHOLE = 0, 1, 2


def _whole_frames(data: bytes | memoryview, end: int, cut_updates: bool) -> int:
    """Whether ``data`` is whole frames, the last one ending where it ends: :data:`_NOT_WHOLE`,
    or whole with (``cut_updates`` and) a WINDOW_UPDATE among them, :data:`_UPDATES_TO_CUT`, or
    without, :data:`_NOTHING_TO_CUT`."""
    pos = 0
    updates = False
    while pos + HEADER_BYTES <= end:
        if data[pos + 3] == _WINDOW_UPDATE:
            updates = cut_updates
        pos += HEADER_BYTES + (data[pos] << 16 | data[pos + 1] << 8 | data[pos + 2])
    if pos != end:
        return _NOT_WHOLE
    return _UPDATES_TO_CUT if updates else _NOTHING_TO_CUT


def _window_update(stream_id: int, increment: int) -> bytes:
    return frame_header(4, _WINDOW_UPDATE, 0, stream_id) + increment.to_bytes(4, "big")


#: Request bodies from this size up are joined into a reused buffer (:class:`BodyBuffers`).
POOLED_FROM = 1 << 20
#: What a server's :class:`BodyBuffers` keeps at most (as Triton's default pinned-memory pool).
POOL_BYTES = 256 << 20
_ROUND = 1 << 16
#: References to a pooled buffer nobody else holds: the pool's list, the loop variable, getrefcount's argument.
_UNUSED_REFS = 3


class BodyBuffers:
    """Reused buffers for joining large request bodies, shared by a server's connections.

    A fresh 16 MiB buffer costs the kernel 4,096 page faults (and zeroed pages) on first write,
    more than the copy itself: joining a 16 MiB body into new memory took 10-40 ms on a busy machine
    and 1.5 ms into memory used before. A body of :data:`POOLED_FROM` bytes or more is copied into
    a pooled ``bytearray`` nothing references any more (its reference count says so: the numpy
    arrays over a request's tensors, a response that sends them back, all hold it until they go),
    and handed on read-only. Buffers are kept up to :data:`POOL_BYTES` in all; past that, a body
    gets a buffer of its own, freed as before.
    """

    __slots__ = ("_buffers", "_kept", "limit")

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self._buffers: list[bytearray] = []
        self._kept = 0
        self.limit = limit

    def join(self, parts: Sequence[bytes | bytearray | memoryview], size: int) -> memoryview:
        """``parts`` (``size`` bytes in all) copied into one buffer, as a read-only view."""
        view = memoryview(self._take(size))
        pos = 0
        for part in parts:
            end = pos + len(part)
            view[pos:end] = part
            pos = end
        return view[:size].toreadonly()

    def _take(self, size: int) -> bytearray:
        """An unused pooled buffer of ``size`` to ``size`` + 1/8 bytes, else a new one (pooled while there is room)."""
        most = size + (size >> 3) + _ROUND
        spare = -1
        buffers = self._buffers
        for index in range(len(buffers)):  # not enumerate: its cached tuple would hold a reference
            buffer = buffers[index]
            if sys.getrefcount(buffer) == _UNUSED_REFS:
                if size <= len(buffer) <= most:
                    return buffer
                spare = index
        buffer = bytearray(-(-size // _ROUND) * _ROUND)
        if spare >= 0 and self._kept + len(buffer) > self.limit:  # make room: drop an unused one
            self._kept -= len(buffers.pop(spare))
        if self._kept + len(buffer) <= self.limit:
            buffers.append(buffer)
            self._kept += len(buffer)
        return buffer

    def take(self, size: int) -> memoryview:
        """A buffer of at least ``size`` bytes to fill (pooled when there is room), as a writable view."""
        return memoryview(self._take(size))


#: Bytes one read of the socket takes at most (uvloop's own read size).
READ_BYTES = 256 << 10
#: A connection's read arena; reads go into it one after the other, and back to its start once
#: nothing holds a view of what was read.
ARENA_BYTES = 1 << 20
#: Room an arena must have left for a read; with less, the connection takes another arena.
MIN_READ_BYTES = 16 << 10
#: Arenas a server keeps for reuse (the busy connections' and spares); past that an arena is a
#: connection's own, freed once nothing holds a view of it.
ARENAS_KEPT = 32
#: References to a pooled arena nobody else holds: the pool's list, the loop variable, getrefcount's argument.
_UNUSED_ARENA_REFS = 3


class ReadArenas:
    """The memory the server's HTTP/2 connections read the socket into (``get_buffer``).

    A plain ``asyncio.Protocol`` gets each read as a new ``bytes`` that the event loop copied out of
    its own buffer: a 16 MiB request was copied twice in Python (the loop's copy, then the join of
    its DATA payloads), and its fresh 256 KiB ``bytes`` cost page faults. Read into an arena, the
    payloads cut out of it are views of the bytes the kernel wrote, and the body's only copy is
    into its joined buffer (:meth:`UnaryStream.read_body <inferd.serving.h2_stream.UnaryStream.read_body>`
    copies a large body's parts as they arrive, so an arena is free again after a read or two).

    An arena is free when nothing but the pool references it: a view of it (a payload a stream
    holds, the connection's current arena) holds a reference through its buffer export, so an
    arena is never written while anything can still read it.
    """

    __slots__ = ("_arenas", "size", "kept")

    def __init__(self, size: int = ARENA_BYTES, kept: int = ARENAS_KEPT) -> None:
        self._arenas: list[bytearray] = []
        self.size = size
        self.kept = kept

    def take(self) -> tuple[bytearray, bool]:
        """A free arena, and whether the pool keeps it (its references then count one more)."""
        arenas = self._arenas
        for index in range(len(arenas)):  # not enumerate: its cached tuple would hold a reference
            arena = arenas[index]
            if sys.getrefcount(arena) == _UNUSED_ARENA_REFS:
                return arena, True
        arena = bytearray(self.size)
        if len(arenas) < self.kept:
            arenas.append(arena)
            return arena, True
        return arena, False

    def free(self) -> int:
        """How many kept arenas nothing holds."""
        count = 0
        arenas = self._arenas
        for index in range(len(arenas)):
            arena = arenas[index]
            count += sys.getrefcount(arena) == _UNUSED_ARENA_REFS
        return count

    def __len__(self) -> int:
        return len(self._arenas)
