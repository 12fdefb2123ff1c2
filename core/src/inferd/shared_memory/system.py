"""A system (POSIX) shared-memory region: a ``/dev/shm`` object mapped into this process."""

from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import Any

import numpy as np

from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument
from inferd.repository.names import name_problem, shown

#: Where POSIX ``shm_open`` keeps its objects on Linux.
SHM_DIR = "/dev/shm"
#: How ``shm_open`` opens an object (glibc): never through a symbolic link, not inherited by children.
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


def shm_path(name: str, key: str) -> str:
    """The file of the shared-memory object ``key`` (``/name`` or ``name``), as ``shm_open``
    resolves it; a key that is not one name (after one leading '/') is refused, naming region ``name``."""
    problem = name_problem(key[1:] if key.startswith("/") else key)
    if problem:
        raise _cannot_open(name, key, f"a key is one name, '/name' or 'name': {problem}")
    return os.path.join(SHM_DIR, key.lstrip("/"))


def open_shm(name: str, key: str) -> int:
    """A read-write descriptor of the shared-memory object ``key``, opened as ``shm_open`` does
    (``O_NOFOLLOW``): a symbolic link, or anything but a regular file of ``/dev/shm``'s file
    system (a hard link to a file elsewhere), is refused, so that a region can only ever map
    shared memory and never another file the server can read or write."""
    path = shm_path(name, key)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise _cannot_open(name, key, f"{why} ({path})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _cannot_open(name, key, f"it is not a regular file ({path})")
        if st.st_dev != os.stat(SHM_DIR).st_dev:
            raise _cannot_open(name, key, f"it is not on the shared-memory file system of {SHM_DIR} ({path})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cannot_open(name: str, key: str, why: str) -> InferdError:
    """Triton's error for a key ``shm_open`` cannot open (an internal error, as Triton answers it)."""
    return InferdError(
        f"Unable to open shared memory region: '{shown(key)}'; registering region '{shown(name)}': {why}",
        ErrorKind.INTERNAL,
    )


class SystemRegion:
    """``byte_size`` bytes at ``offset`` of the shared-memory object ``key``, mapped read-write.

    ``view`` is a memoryview over exactly those bytes: inputs are numpy arrays over it (no copy)
    and outputs are copied straight into it.
    """

    kind = "system"

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        fd = open_shm(name, key)
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
