"""The wire between the server and the stub process of an isolated Python model.

Control messages travel over a ``SOCK_SEQPACKET`` socket pair: each message is one
``marshal``-encoded ``(kind, body)`` tuple (plain data only; ``marshal`` never runs code).
Tensor bytes never go through the socket: the sender copies a message's tensors into a
:class:`Ring` of shared memory both sides mapped at start (one per direction), and the receiver's
numpy arrays are views of it; the room is reused once the receiver dropped them. A block too
large for the ring (or sent while it is full) goes into a fresh anonymous shared-memory file
(``memfd_create``; a ``/dev/shm`` file opened with ``O_EXCL | O_NOFOLLOW`` and unlinked at once
where memfd is missing) whose descriptor travels with the message (``SCM_RIGHTS``); the receiver's
arrays then view that mapping. No name is ever left in ``/dev/shm`` and ``multiprocessing``'s
resource tracker is not involved.

This module imports only the standard library and numpy: the stub of a model with its own
``EXECUTION_ENV_PATH`` interpreter imports it too.
"""

from __future__ import annotations

import collections
import ctypes
import marshal
import mmap
import os
import secrets
import socket
import struct
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

# Server -> stub.
INIT = 1  # (settings dict) -> READY | FAILED
EXEC = 2  # (batch id, [request...]) + tensors -> RESULT
BLS_REPLY = 3  # (call id, what, payload) + tensors
FINALIZE = 4  # () -> FINALIZED, then the stub exits
AUTOCOMPLETE = 5  # (config json dict, name, path, model dir) -> READY(config dict) | FAILED
# Stub -> server.
READY = 10
FAILED = 11  # (message, error kind)
RESULT = 12  # (batch id, [response | error | None...], [rescheduled index...]) + tensors
SEND = 13  # (batch id, request index, response | error | None, final) + tensors
BLS_CALL = 14  # (call id, decoupled, request) + tensors
LOG = 15  # (level, logger name, message)
METRIC = 16  # (operation, ...)
FINALIZED = 17
_LARGE = 99  # the real message is in the attached shared memory (first descriptor)

#: Messages larger than this go through shared memory too (a datagram must fit the socket buffer).
_INLINE_LIMIT = 60_000
_RECV_SIZE = 65_536
_MAX_FDS = 2
_ALIGN = 64
_LENGTH = struct.Struct("<I")

_BYTES = "BYTES"

#: A received message's tensor block: a buffer object over the ring, a mapped file, or None.
Block = Any


def _align(n: int) -> int:
    return (n + _ALIGN - 1) & ~(_ALIGN - 1)


def shared_file(size: int) -> int:
    """A new anonymous shared-memory file of ``size`` bytes; returns its descriptor (close-on-exec)."""
    try:
        fd = os.memfd_create("inferd-python", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        path = f"/dev/shm/inferd-python-{os.getpid()}-{secrets.token_hex(8)}"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        os.unlink(path)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _serialize_bytes(array: np.ndarray) -> bytes:
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def _deserialize_bytes(view: memoryview, shape: tuple[int, ...]) -> np.ndarray:
    items: list[bytes] = []
    offset, end = 0, len(view)
    unpack = _LENGTH.unpack_from
    while offset < end:
        (length,) = unpack(view, offset)
        offset += 4
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out.reshape(shape)


class Tensors:
    """Arrays being packed into one shared-memory block: ``add`` each, then ``seal`` for the fd."""

    __slots__ = ("_items", "_size")

    def __init__(self) -> None:
        self._items: list[tuple[int, np.ndarray | bytes]] = []
        self._size = 0

    def add(self, array: np.ndarray, datatype: str) -> tuple[str, tuple[int, ...], int, int]:
        """Reserve room for ``array``; returns its descriptor (datatype, shape, offset, bytes)."""
        if datatype == _BYTES or array.dtype.kind in ("O", "S", "U"):
            data: np.ndarray | bytes = _serialize_bytes(array)
            nbytes = len(data)
            datatype = _BYTES
        else:
            data = array
            nbytes = array.nbytes
        offset = self._size
        if nbytes:
            self._items.append((offset, data))
            self._size = offset + _align(nbytes)
        return (datatype, tuple(array.shape), offset, nbytes)

    @property
    def size(self) -> int:
        return self._size

    def fill(self, buffer: mmap.mmap, base: int) -> None:
        """Copy every array into ``buffer`` at ``base`` + its offset."""
        for offset, data in self._items:
            start = base + offset
            if isinstance(data, bytes):
                buffer[start : start + len(data)] = data
            else:
                target = np.ndarray(data.shape, data.dtype, buffer=buffer, offset=start)
                np.copyto(target, data, casting="no")
                del target

    def seal(self) -> int:
        """Copy every array into a new shared-memory file of their own; its descriptor."""
        fd = shared_file(self._size)
        try:
            with mmap.mmap(fd, self._size) as mm:
                self.fill(mm, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd


class Ring:
    """A shared-memory ring for the tensor blocks one side sends the other, mapped once by both.

    The writer copies a block in at its write position and names it in the message. The reader's
    arrays are views of the ring: the block stays reserved until the last of them is dropped
    (a finalizer on the block's buffer object), then the shared read position moves past every
    block released in order, and the writer may reuse the room. Pages of the ring are allocated
    once, on first use: a fresh shared-memory file per message costs a page fault per 4 KiB.
    A block that does not fit (too large, or the ring is full of blocks still held) gets a
    shared-memory file of its own.
    """

    HEADER = 64
    SIZE = 32 * 1024 * 1024
    #: Blocks up to this size go through the ring; larger ones get a file of their own.
    BLOCK_LIMIT = SIZE // 4
    _POSITION = struct.Struct("<Q")

    def __init__(self, fd: int, size: int) -> None:
        self.mm = mmap.mmap(fd, size)
        self.capacity = size - self.HEADER
        self.head = 0  # writer: bytes handed out so far (logical, never wraps)
        self._held: collections.deque[list[int]] = collections.deque()  # reader: [end, released] in order
        self._lock = threading.RLock()  # a finalizer may run inside take (garbage collection)

    @classmethod
    def create(cls, size: int = SIZE) -> tuple[Ring, int]:
        """A new ring and its descriptor, to hand the other side (then close it)."""
        fd = shared_file(size)
        return cls(fd, size), fd

    def put(self, tensors: Tensors) -> tuple[int, int, int] | None:
        """Copy the block in: (offset, size, end) for the message, or None when it does not fit."""
        size = tensors.size
        if size > self.BLOCK_LIMIT:
            return None
        pos = self.head % self.capacity
        pad = self.capacity - pos if pos + size > self.capacity else 0
        (released,) = self._POSITION.unpack_from(self.mm, 0)
        if self.capacity - (self.head - released) < pad + size:
            return None
        base = self.HEADER + (0 if pad else pos)
        tensors.fill(self.mm, base)
        self.head += pad + size
        return base, size, self.head

    def take(self, where: tuple[int, int, int]) -> Any:
        """The block as a buffer object over the ring; its room is freed once nothing refers to it."""
        base, size, end = where
        owner = (ctypes.c_char * size).from_buffer(self.mm, base)
        entry = [end, 0]
        with self._lock:
            self._held.append(entry)
        weakref.finalize(owner, self._release, entry)
        return owner

    def _release(self, entry: list[int]) -> None:
        with self._lock:
            entry[1] = 1
            end = None
            while self._held and self._held[0][1]:
                end = self._held.popleft()[0]
            if end is not None:
                self._POSITION.pack_into(self.mm, 0, end)


def view(desc: Sequence[Any], block: Block, dtypes: dict[str, np.dtype]) -> np.ndarray:
    """The array a descriptor from :meth:`Tensors.add` names: a view of ``block`` (BYTES: decoded)."""
    datatype, shape, offset, nbytes = desc
    shape = tuple(shape)
    if datatype == _BYTES:
        if not nbytes:
            return np.empty(shape, dtype=np.object_)
        return _deserialize_bytes(memoryview(block).cast("B")[offset : offset + nbytes], shape)
    dtype = dtypes[datatype]
    if not nbytes:
        return np.empty(shape, dtype=dtype)
    return np.ndarray(shape, dtype, buffer=block, offset=offset)


class Channel:
    """One end of the control socket: ``send`` from any thread, ``recv`` from one reader thread.

    ``out_ring`` carries the small tensor blocks this side sends, ``in_ring`` those it receives.
    """

    def __init__(self, sock: socket.socket, out_ring: Ring, in_ring: Ring) -> None:
        self.sock = sock
        self._out = out_ring
        self._in = in_ring
        self._lock = threading.Lock()

    def send(self, kind: int, body: Any, tensors: Tensors | None = None) -> None:
        """Send a message, with the tensor block ``tensors`` (in the ring, or a file of its own)."""
        fds: list[int] = []
        try:
            with self._lock:
                where = None
                if tensors is not None and tensors.size:
                    where = self._out.put(tensors)
                    if where is None:
                        fds.append(tensors.seal())
                data = marshal.dumps((kind, body, where))
                if len(data) > _INLINE_LIMIT:
                    big = shared_file(len(data))
                    with mmap.mmap(big, len(data)) as mm:
                        mm[:] = data
                    fds.insert(0, big)
                    data = marshal.dumps((_LARGE, len(data), None))
                if fds:
                    socket.send_fds(self.sock, [data], fds)
                else:
                    self.sock.send(data)
        finally:
            for f in fds:
                os.close(f)

    def recv(self) -> tuple[int, Any, Any] | None:
        """The next message: (kind, body, its tensor block or None); None once the other end is gone."""
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, _RECV_SIZE, _MAX_FDS)
        except (ConnectionError, OSError):
            return None
        if not data:
            for f in fds:
                os.close(f)
            return None
        try:
            kind, body, where = marshal.loads(data)
            if kind == _LARGE:
                with mmap.mmap(fds[0], body, access=mmap.ACCESS_READ) as mm:
                    kind, body, where = marshal.loads(mm[:])
                os.close(fds.pop(0))
            if where is not None:
                block: Any = self._in.take(where)
            else:
                block = mmap.mmap(fds[0], 0) if fds else None
        finally:
            for f in fds:
                os.close(f)
        return kind, body, block

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def plain(value: Any) -> Any:
    """``value`` if ``marshal`` can carry it, else its JSON-able form (request parameters)."""
    try:
        marshal.dumps(value)
        return value
    except ValueError:
        import json

        return json.loads(json.dumps(value, default=str))
