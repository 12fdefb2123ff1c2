"""A system (POSIX) shared-memory region: a ``/dev/shm`` object mapped into this process."""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from inferd.errors import ErrorKind, InferdError, InvalidArgument

#: Where POSIX ``shm_open`` keeps its objects on Linux.
SHM_DIR = "/dev/shm"


def shm_path(key: str) -> str:
    """The file of the shared-memory object ``key`` (``/name`` or ``name``), as ``shm_open``
    resolves it; a key that names anything outside ``/dev/shm`` cannot be opened."""
    name = key.lstrip("/")
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise _cannot_open(key, "a key is one name ('/name'), with no '/' inside")
    return os.path.join(SHM_DIR, name)


def _cannot_open(key: str, why: str) -> InferdError:
    return InferdError(f"Unable to open shared memory region: '{key}'; {why}", ErrorKind.INTERNAL)


class SystemRegion:
    """``byte_size`` bytes at ``offset`` of the shared-memory object ``key``, mapped read-write.

    ``view`` is a memoryview over exactly those bytes: inputs are numpy arrays over it (no copy)
    and outputs are copied straight into it.
    """

    kind = "system"

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        path = shm_path(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise _cannot_open(key, f"{exc.strerror} ({path})") from None
        try:
            size = os.fstat(fd).st_size
            if byte_size <= 0 or offset + byte_size > size:
                raise InvalidArgument(
                    f"failed to register shared memory region '{name}': invalid args; offset {offset} + "
                    f"byte_size {byte_size} must lie within the {size} bytes of '{key}' (and byte_size be positive)"
                )
            self._map = mmap.mmap(fd, offset + byte_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            raise InvalidArgument(
                f"failed to register shared memory region '{name}': unable to process address space {exc.strerror}"
            ) from None
        finally:
            os.close(fd)
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.view = memoryview(self._map)[offset : offset + byte_size]

    def status(self) -> dict[str, Any]:
        """Triton's status entry of the region."""
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def input(self, offset: int, byte_size: int) -> memoryview:
        """The bytes at ``offset`` (within the region), uncopied."""
        return self.view[offset : offset + byte_size]

    def output(self, offset: int, byte_size: int) -> ViewSink:
        """Where an output of up to ``byte_size`` bytes at ``offset`` is written."""
        return ViewSink(self.view[offset : offset + byte_size])

    def close(self) -> None:
        """Unmap, or leave that to the last array still viewing the region (a request in flight)."""
        try:
            self.view.release()
            self._map.close()
        except BufferError:
            pass  # exported: unmapped when the last view goes


class ViewSink:
    """Writes an output's bytes into mapped memory (the slice keeps the mapping alive)."""

    __slots__ = ("view",)

    def __init__(self, view: memoryview) -> None:
        self.view = view

    def write(self, data: bytes | memoryview) -> None:
        """Copy ``data`` to the start of the slice: one copy (numpy allows overlapping memory)."""
        size = len(data)
        if size:
            np.frombuffer(self.view, np.uint8, size)[:] = np.frombuffer(data, np.uint8)
