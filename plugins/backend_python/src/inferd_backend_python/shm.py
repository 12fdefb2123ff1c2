"""Shared memory for the tensors a message between the server and a stub carries.

The sender packs a message's arrays into one block (:class:`Tensors`) and copies it into the
:class:`Ring` of its direction, mapped once by both sides, or into a fresh anonymous file of its
own (:func:`shared_file`, sealed against shrinking once filled) when the ring has no room. The
receiver's arrays are views of the block (:func:`view`), checked against it first: a descriptor
whose sizes or offsets do not fit raises :class:`Malformed`, and a file is mapped only when sealed
(a file cut short under a mapping would kill the server with SIGBUS).

This module imports only the standard library and numpy: the stub of a model with its own
``EXECUTION_ENV_PATH`` interpreter imports it too.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import math
import mmap
import os
import struct
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferd.api import InvalidArgument, deserialize_bytes_tensor, serialize_bytes_tensor

_ALIGN = 64
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_BYTES = "BYTES"

#: A received message's tensor block: a buffer object over the ring, a mapped file, or None.
Block = Any


class Malformed(ValueError):
    """A message that breaks the protocol (sizes, offsets, types, an unsealed file)."""


def shared_file(size: int) -> int:
    """A new anonymous shared-memory file of ``size`` bytes; returns its descriptor (close-on-exec).

    Call :func:`seal` once it is filled: a receiver maps only sealed files."""
    fd = os.memfd_create("inferd-python", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def seal(fd: int) -> None:
    """Fix the size of a file from :func:`shared_file` for good (no side can shrink or grow it)."""
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)


def map_sealed(fd: int, size: int | None, access: int = mmap.ACCESS_WRITE) -> mmap.mmap:
    """Map a received file, checked: sealed against shrinking and at least ``size`` bytes."""
    try:
        sealed = fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK
    except OSError:
        sealed = 0
    if not sealed:
        raise Malformed("a shared-memory file that is not sealed against shrinking")
    actual = os.fstat(fd).st_size
    if not actual or (size is not None and not 0 < size <= actual):
        raise Malformed(f"{size} bytes wanted from a file of {actual}")
    return mmap.mmap(fd, actual if size is None else size, access=access)


def _deserialize_bytes(view: memoryview, shape: tuple[int, ...]) -> np.ndarray:
    """A BYTES tensor from a stub (the wire layout inferd.contracts.types reads), or :class:`Malformed`."""
    try:
        return deserialize_bytes_tensor(view, math.prod(shape)).reshape(shape)
    except InvalidArgument as exc:
        raise Malformed(exc.message) from None


class Tensors:
    """Arrays being packed into one block: ``add`` each; the channel then copies them into the ring,
    a file of their own (:meth:`to_file`) or the message itself (:meth:`to_bytes`)."""

    __slots__ = ("_items", "size")

    def __init__(self) -> None:
        self._items: list[tuple[int, np.ndarray | bytes]] = []
        #: Bytes of the block so far (each array's room aligned).
        self.size = 0

    def add(self, array: np.ndarray, datatype: str) -> tuple[str, tuple[int, ...], int, int]:
        """Reserve room for ``array``; returns its descriptor (datatype, shape, offset, bytes)."""
        if datatype == _BYTES or array.dtype.kind in ("O", "S", "U"):
            data: np.ndarray | bytes = serialize_bytes_tensor(array)
            nbytes = len(data)
            datatype = _BYTES
        else:
            data = array
            nbytes = array.nbytes
        offset = self.size
        if nbytes:
            self._items.append((offset, data))
            self.size = offset + ((nbytes + _ALIGN - 1) & ~(_ALIGN - 1))  # aligned: views of it are
        return (datatype, array.shape, offset, nbytes)

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

    def to_bytes(self) -> bytes:
        """Every array copied into one buffer, to travel in the message itself."""
        items = self._items
        if len(items) == 1:  # one tensor (a response's output, often): it is the buffer, at offset 0
            data = items[0][1]
            return data if isinstance(data, bytes) else data.tobytes()
        parts: list[bytes] = []
        end = 0
        for offset, data in items:
            if offset > end:
                parts.append(bytes(offset - end))
            chunk = data if isinstance(data, bytes) else data.tobytes()
            parts.append(chunk)
            end = offset + len(chunk)
        return b"".join(parts)

    def to_file(self) -> int:
        """Copy every array into a new sealed shared-memory file of their own; its descriptor."""
        fd = shared_file(self.size)
        try:
            with mmap.mmap(fd, self.size) as mm:
                self.fill(mm, 0)
            seal(fd)
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
        self.mm = map_sealed(fd, size)
        self.capacity = size - self.HEADER
        self.head = 0  # writer: bytes handed out so far (logical, never wraps)
        self._held: collections.deque[list[int]] = collections.deque()  # reader: [end, released] in order
        self._lock = threading.RLock()  # a finalizer may run inside take (garbage collection)

    @classmethod
    def create(cls, size: int = SIZE) -> tuple[Ring, int]:
        """A new ring and its descriptor, to hand the other side (then close it)."""
        fd = shared_file(size)
        try:
            seal(fd)
            return cls(fd, size), fd
        except BaseException:
            os.close(fd)
            raise

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
        ints = type(base) is int and type(size) is int and type(end) is int
        if not (ints and base >= self.HEADER and size > 0 and base + size <= len(self.mm) and end >= 0):
            raise Malformed(f"a tensor block at {where!r} outside the ring")
        owner = (ctypes.c_char * size).from_buffer(self.mm, base)
        entry = [end, 0]
        with self._lock:
            self._held.append(entry)
        weakref.finalize(owner, self._release, entry)
        return owner

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # arrays still view it: unmapped when the last of them goes
            self.mm.close()

    def _release(self, entry: list[int]) -> None:
        with self._lock:
            entry[1] = 1
            end = None
            while self._held and self._held[0][1]:
                end = self._held.popleft()[0]
            if end is not None:
                self._POSITION.pack_into(self.mm, 0, end)


def view(desc: Sequence[Any], block: Block, dtypes: dict[str, np.dtype]) -> np.ndarray:
    """The array a descriptor from :meth:`Tensors.add` names: a view of ``block`` (BYTES: decoded).

    Raises :class:`Malformed` unless the descriptor's shape, size and offset fit the block."""
    datatype, shape, offset, nbytes = desc
    if block is not None and nbytes and datatype != _BYTES:
        # numpy refuses a negative offset or dimension, and a view past the end of the block
        try:
            array = np.ndarray(shape, dtypes[datatype], block, offset)
        except (TypeError, ValueError, KeyError, OverflowError) as exc:
            raise Malformed(
                f"a {datatype!r} tensor of shape {shape!r}, {nbytes!r} bytes at {offset!r}: {exc}"
            ) from None
        if array.nbytes != nbytes:
            raise Malformed(f"a {datatype} tensor of shape {list(shape)} in {nbytes} bytes")
        return array
    try:
        if datatype == _BYTES:
            data = memoryview(block or b"").cast("B")[offset : offset + nbytes] if nbytes else memoryview(b"")
            if len(data) != nbytes or offset < 0:
                raise Malformed(f"a BYTES tensor of {nbytes} bytes at {offset} outside its block")
            return _deserialize_bytes(data, tuple(shape))
        dtype = dtypes[datatype]
        if not nbytes:
            if math.prod(shape) != 0:
                raise Malformed(f"a {datatype} tensor of shape {list(shape)} in no bytes")
            return np.empty(shape, dtype=dtype)
        if block is None:
            raise Malformed(f"a tensor ({datatype}, {nbytes!r} bytes) in a message without a tensor block")
        array = np.ndarray(shape, dtype, buffer=block, offset=offset)
    except (TypeError, ValueError, KeyError, OverflowError, struct.error) as exc:
        if isinstance(exc, Malformed):
            raise
        raise Malformed(f"a {datatype!r} tensor of shape {shape!r}, {nbytes!r} bytes at {offset!r}: {exc}") from None
    if array.nbytes != nbytes:
        raise Malformed(f"a {datatype} tensor of shape {list(shape)} in {nbytes} bytes")
    return array
