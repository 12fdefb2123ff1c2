"""Giving an evicted model's memory back to the system, at the cost the evidence justifies.

An evicted version's arrays of :data:`~inferd.lifecycle.budget.LARGE_BLOCK` or more go back as they
are freed (:func:`map_large_blocks`); its small blocks stay on glibc's heap, and objects in reference
cycles stay until the collector finds them. The two ways to get those back cost the requests
served meanwhile: ``malloc_trim`` holds the allocator's locks while it walks the heap (every
thread that allocates waits), a full ``gc.collect`` holds the interpreter (25-40 ms in a server
with its imports). Measured with ``benchmarks/many_models.py`` (40 models, a budget for 8), running
them after every eviction whose RSS had not yet come down put the warm requests' p99 at 22-32 ms
against 3 ms fully loaded, and gave back nothing the next load would not reuse. So an eviction
(:func:`reclaim`) collects only when the version's own objects outlive its unload (a cycle holds
them) and trims only when the heap holds, free, at least half of what the model held.

:class:`MemoryChanges` tells an eviction whether the RSS it read moved by its doing alone: loads and
evictions overlap under traffic, and what two of them free or take shows in the one RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from inferd.lifecycle.budget import LARGE_BLOCK


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _libc()
#: glibc's ``mallopt`` parameter for the mmap threshold.
_M_MMAP_THRESHOLD = -3


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 and later)."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


_mallinfo2 = getattr(_LIBC, "mallinfo2", None)
if _mallinfo2 is not None:
    _mallinfo2.restype = _MallInfo2


def map_large_blocks() -> None:
    """Have glibc map every block of :data:`LARGE_BLOCK` or more on its own, so that freeing it (a
    model's weights, when the model unloads) gives it back to the system at once. By default glibc
    raises its threshold after each large free (up to 32 MiB), and the next model's arrays land on
    its heap, which keeps what is freed until a ``malloc_trim``."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)


def heap_free_bytes() -> int | None:
    """Bytes free on glibc's heaps (every arena), which a ``malloc_trim`` could give back; None
    where glibc cannot say (another C library, glibc before 2.33)."""
    return int(_mallinfo2().fordblks) if _mallinfo2 is not None else None


def references(objects: Iterable[object]) -> list[weakref.ref[Any]]:
    """Weak references to those of ``objects`` that take one (:func:`collected`)."""
    refs: list[weakref.ref[Any]] = []
    for obj in objects:
        with contextlib.suppress(TypeError):
            refs.append(weakref.ref(obj))
    return refs


async def collected(refs: Iterable[weakref.ref[Any]], timeout: float = 0.05) -> bool:
    """Wait up to ``timeout`` s until the objects behind ``refs`` are gone; whether they are.

    An unloaded version's last references go a moment after its close returns (the thread that
    closed it drops the call it ran after the loop has its result); objects in reference cycles
    stay until a collection."""
    deadline = time.monotonic() + timeout
    while any(ref() is not None for ref in refs):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.002)
    return True


def reclaim(footprint: int, cycles: bool, alone: bool) -> None:
    """After an eviction whose RSS came down by less than half its ``footprint`` (blocking: run
    it off the event loop): collect if ``cycles`` hold its objects, then trim the heap if it holds
    at least half the footprint free (where glibc cannot say, if the eviction ran ``alone``: no
    load or other eviction moved the RSS meanwhile)."""
    if cycles:
        gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is None:
        return
    free = heap_free_bytes()
    if (free >= footprint // 2) if free is not None else alone:
        trim(0)


class MemoryChanges:
    """The loads and evictions under way, so that one can tell whether it ran alone."""

    def __init__(self) -> None:
        self._started = 0
        self._running = 0

    @contextlib.contextmanager
    def change(self) -> Iterator[Callable[[], bool]]:
        """Around a load or an eviction: yields a check, true while no other began or ran beside it."""
        self._started += 1
        self._running += 1
        mark, first = self._started, self._running == 1
        try:
            yield lambda: first and self._started == mark
        finally:
            self._running -= 1
