"""The wire between the server and the stub process of an isolated Python model.

Control messages travel over a ``SOCK_SEQPACKET`` socket pair: each message is one
``marshal``-encoded ``(kind, body)`` tuple (plain data only; ``marshal`` never runs code).
A message's tensors up to :data:`INLINE_TENSORS` bytes travel in it. Larger ones never go through
the socket: the sender copies them into a :class:`~inferd_backend_python.shm.Ring` of shared
memory both sides mapped at start (one per direction), and the receiver's numpy arrays are views
of it; the room is reused once the receiver dropped them. A block too large for the ring (or sent
while it is full) goes into a fresh anonymous shared-memory file (``memfd_create``, sealed against
shrinking once filled) whose descriptor travels with the message (``SCM_RIGHTS``); the receiver's
arrays then view that mapping. No name is ever left in ``/dev/shm`` and ``multiprocessing``'s
resource tracker is not involved.

The server never trusts what a stub sends: the sizes and offsets of every tensor are checked
against the block that holds it before a numpy view is made, a file is mapped only when sealed
against shrinking (a file cut short under a mapping would kill the server with SIGBUS), and a
message larger than :data:`MESSAGE_LIMIT` is refused. A malformed message raises
:class:`~inferd_backend_python.shm.Malformed`.

This module imports only the standard library and numpy: the stub of a model with its own
``EXECUTION_ENV_PATH`` interpreter imports it too.
"""

from __future__ import annotations

import array
import collections
import contextlib
import fcntl
import marshal
import mmap
import os
import socket
import termios
import threading
from collections.abc import Callable
from typing import Any

from inferd_backend_python.shm import Block, Malformed, Ring, Tensors, map_sealed, seal, shared_file

# Server -> stub.
INIT = 1  # (settings dict) -> READY | FAILED
EXEC = 2  # (batch id, [request...]) + tensors -> RESULT
REPLY = 3  # (call id, what, payload) + tensors: a BLS call's responses, an is_cancelled() answer
FINALIZE = 4  # () -> FINALIZED, then the stub exits
AUTOCOMPLETE = 5  # (config json dict, name, path, model dir) -> READY(config dict) | FAILED
IS_READY = 6  # (call id) -> READINESS
# Stub -> server.
READY = 10  # after INIT: (pid, whether the model defines is_ready)
FAILED = 11  # (message, error kind)
RESULT = 12  # (batch id, [response | error | None...], [rescheduled index...], ns the batch before ended) + tensors
SEND = 13  # (batch id, request index, response | error | None, final) + tensors
BLS_CALL = 14  # (call id, decoupled, request) + tensors
LOG = 15  # (level, logger name, message)
METRIC = 16  # (operation, ...)
FINALIZED = 17
CANCELLED = 18  # (call id, batch id, request index) -> REPLY (call id, "cancelled", bool)
READINESS = 19  # (call id, is_ready() answer, why it failed | None)
_LARGE = 99  # the real message is in the attached shared memory (first descriptor)

#: Messages larger than this go through shared memory too (a datagram must fit the socket buffer).
_INLINE_LIMIT = 60_000
#: A message's tensors up to this size travel in the message itself: for small tensors a copy
#: costs less than a view of the ring and its release.
INLINE_TENSORS = 16 * 1024
_RECV_SIZE = 65_536
_MAX_FDS = 2
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * 4)
# plain ints: the socket module's flags are enums, and an operation on them costs a microsecond or two
_TRUNCATED = int(socket.MSG_TRUNC) | int(socket.MSG_CTRUNC)
_SOL_SOCKET = int(socket.SOL_SOCKET)
_SCM_RIGHTS = int(socket.SCM_RIGHTS)
#: ``marshal``'s format version 2: without the back-references of 3 and 4 (a table built for every
#: ``dumps``, a list for every ``loads``), the small messages of a request encode and decode in
#: about 40% of the time (1.9 µs instead of 4.7 for an EXEC message and its decoding, here).
_MARSHAL_VERSION = 2
#: The largest control message (not counting tensors) a side accepts.
MESSAGE_LIMIT = 64 * 1024 * 1024
#: A side that sends without waiting refuses to queue more messages than this for a peer that does
#: not read them (:class:`Backlogged`).
BACKLOG_LIMIT = 4096


class Backlogged(OSError):
    """The peer left more than :data:`BACKLOG_LIMIT` messages unread."""


#: A received message: (kind, body, its tensor block or None).
Message = tuple[int, Any, Block]


class Channel:
    """One end of the control socket: ``send`` from any thread, ``recv`` from one thread at a time.

    ``out_ring`` carries the small tensor blocks this side sends, ``in_ring`` those it receives.
    A blocking channel (the stub's) waits in ``send`` while the socket is full. A non-blocking one
    (the server's; its event loop reads it) never waits there: a message the socket does not take
    queues, in order, ``on_backlog`` is called when the queue starts (to arrange :meth:`flush` once
    the socket takes more), and ``send(..., wait=True)`` from another thread first waits until the
    queue is empty: a peer that reads slowly holds up only those threads. More than
    :data:`BACKLOG_LIMIT` queued raises :class:`Backlogged`.
    """

    def __init__(
        self, sock: socket.socket, out_ring: Ring, in_ring: Ring, on_backlog: Callable[[], None] | None = None
    ) -> None:
        self.sock = sock
        self._out = out_ring
        self._in = in_ring
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._on_backlog = on_backlog
        self._waits = on_backlog is None
        self._backlog: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self.closed = False
        #: A received tensor block larger than this is :class:`Malformed` (None: no limit).
        self.block_limit: int | None = None
        if not self._waits:
            sock.setblocking(False)
        self._fd = sock.fileno()
        #: Where ``recv`` reads (one reader at a time): ``marshal`` copies what it decodes out of it.
        self._buffer = memoryview(bytearray(_RECV_SIZE))
        self._into = [self._buffer]
        self._count = array.array("i", [0])

    # -- sending --

    def send(self, kind: int, body: Any, tensors: Tensors | None = None, *, wait: bool = True) -> None:
        """Send a message, with the tensor block ``tensors`` (in the ring, or a file of its own)."""
        size = 0 if tensors is None else tensors.size
        data = None
        if size <= INLINE_TENSORS:  # the common case: one datagram, no descriptor, marshalled outside the lock
            data = marshal.dumps(
                (kind, body, tensors.to_bytes() if tensors is not None and size else None), _MARSHAL_VERSION
            )
            if len(data) > _INLINE_LIMIT:
                data = None
        fds: list[int] = []
        with self._lock:
            if not self._waits and wait:
                while self._backlog and not self.closed:
                    self._drained.wait()
            if self.closed or self._on_backlog is None and not self._waits:
                raise BrokenPipeError("the channel is closed")
            try:
                if data is None:
                    data, fds = self._pack(kind, body, tensors)
                if self._waits:
                    self._transmit(data, fds)
                elif self._backlog or not self._try(data, fds):
                    self._queue(data, fds)
                    fds = []
            finally:
                for f in fds:
                    os.close(f)

    def _queue(self, data: bytes, fds: list[int]) -> None:
        """Queue a message the socket did not take (the lock held); it owns ``fds`` once queued."""
        if len(self._backlog) >= BACKLOG_LIMIT:
            raise Backlogged(f"the peer left {len(self._backlog)} messages unread")
        self._backlog.append((data, fds))
        if len(self._backlog) == 1 and self._on_backlog is not None:
            self._on_backlog()

    def flush(self) -> bool:
        """Send what queued, as far as the socket takes it; True once nothing is left."""
        with self._lock:
            backlog = self._backlog
            while backlog:
                data, fds = backlog[0]
                if not self._try(data, fds):
                    return False
                backlog.popleft()
                for f in fds:
                    os.close(f)
            self._drained.notify_all()
            return True

    def _pack(self, kind: int, body: Any, tensors: Tensors | None) -> tuple[bytes, list[int]]:
        fds: list[int] = []
        try:
            where: Any = None
            if tensors is not None and tensors.size:
                if tensors.size <= INLINE_TENSORS:
                    where = tensors.to_bytes()
                else:
                    where = self._out.put(tensors)
                    if where is None:
                        fds.append(tensors.to_file())
            data = marshal.dumps((kind, body, where), _MARSHAL_VERSION)
            if len(data) > _INLINE_LIMIT:
                if len(data) > MESSAGE_LIMIT:
                    raise ValueError(f"a message of {len(data)} bytes, more than the {MESSAGE_LIMIT} allowed")
                big = shared_file(len(data))
                fds.insert(0, big)
                with mmap.mmap(big, len(data)) as mm:
                    mm[:] = data
                seal(big)
                data = marshal.dumps((_LARGE, len(data), None), _MARSHAL_VERSION)
        except BaseException:
            for f in fds:
                os.close(f)
            raise
        return data, fds

    def _transmit(self, data: bytes, fds: list[int]) -> None:
        if fds:
            socket.send_fds(self.sock, [data], fds)
        else:
            self.sock.send(data)

    def _try(self, data: bytes, fds: list[int]) -> bool:
        try:
            self._transmit(data, fds)
        except BlockingIOError:
            return False
        return True

    # -- receiving --

    def recv(self) -> Message | None:
        """The next message; None once the other end is gone. A non-blocking channel raises
        ``BlockingIOError`` when none is waiting; a broken message raises :class:`Malformed`."""
        while True:
            try:
                size, ancillary, flags, _ = self.sock.recvmsg_into(self._into, _ANCILLARY)
                break
            except BlockingIOError:
                raise
            except ConnectionResetError:  # the peer left messages of ours unread; what it sent still follows
                continue
            except OSError:
                return None
        fds: list[int] = []
        if ancillary:
            for level, kind, payload in ancillary:
                if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
                    fds.extend(memoryview(payload[: len(payload) - len(payload) % 4]).cast("i"))
        if not size:
            for f in fds:
                os.close(f)
            return None
        try:
            if flags & _TRUNCATED:
                raise Malformed("a message longer than a datagram, or with too many files")
            kind, body, where = _loads(self._buffer[:size])
            if kind == _LARGE:
                if not fds or type(body) is not int or body > MESSAGE_LIMIT:
                    raise Malformed(f"a large message of {body!r} bytes")
                with map_sealed(fds[0], body, mmap.ACCESS_READ) as mm:
                    kind, body, where = _loads(mm)
                os.close(fds.pop(0))
            if where is None:
                block: Any = map_sealed(fds[0], None) if fds else None
            elif type(where) is bytes:
                block = bytearray(where)  # the arrays own a (writable) copy: nothing to release
            else:
                block = self._in.take(where)
            limit = self.block_limit
            if limit is not None and block is not None and len(block) > limit:
                raise Malformed(f"{len(block)} bytes of tensors, more than the {limit} allowed")
        finally:
            for f in fds:
                os.close(f)
        return kind, body, block

    def waiting(self) -> bool:
        """Whether a message (or the end of the stream) may wait to be read: False only when none does
        (one ``ioctl``, cheaper than a ``recv`` that fails)."""
        try:
            fcntl.ioctl(self._fd, termios.FIONREAD, self._count)
        except OSError:
            return True
        return self._count[0] > 0

    def close(self) -> None:
        """Close the socket and unmap the rings (a ring that arrays still view goes with the last of them)."""
        with self._lock:
            self.closed = True
            self._on_backlog = None
            for _, fds in self._backlog:
                for f in fds:
                    os.close(f)
            self._backlog.clear()
            self._drained.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._out.close()
        self._in.close()


def _loads(data: Any) -> tuple[int, Any, Any]:
    try:
        kind, body, where = marshal.loads(data)
    except (ValueError, TypeError, EOFError) as exc:
        raise Malformed(f"undecodable ({exc})") from None
    if type(kind) is not int:
        raise Malformed(f"a message of kind {kind!r}")
    return kind, body, where


def plain(value: Any) -> Any:
    """``value`` if ``marshal`` can carry it, else its JSON-able form (request parameters)."""
    try:
        marshal.dumps(value)
        return value
    except ValueError:
        import json

        return json.loads(json.dumps(value, default=str))
