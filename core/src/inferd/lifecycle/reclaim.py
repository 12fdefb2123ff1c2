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
them) and trims only when nothing else ran beside it.

:class:`MemoryChanges` tells an eviction whether the RSS it read moved by its doing alone: loads and
evictions overlap under traffic, and what two of them free or take shows in the one RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from inferd.lifecycle.budget import LARGE_BLOCK


def _libc() -> ctypes.CDLL | None:
    """The C library's functions, as the process has them (``find_library`` would run ``ldconfig``:
    9 ms of every server's start)."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


_LIBC = _libc()
#: glibc's ``mallopt`` parameter for the mmap threshold.
_M_MMAP_THRESHOLD = -3


def map_large_blocks() -> None:
    """Have glibc map every block of :data:`LARGE_BLOCK` or more on its own, so that freeing it (a
    model's weights, when the model unloads) gives it back to the system at once. By default glibc
    raises its threshold after each large free (up to 32 MiB), and the next model's arrays land on
    its heap, which keeps what is freed until a ``malloc_trim``."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK)


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


def reclaim(cycles: bool, alone: bool) -> None:
    """After an eviction whose RSS came down by less than half its footprint (blocking: run it off
    the event loop): collect if ``cycles`` hold its objects; trim the heap if the eviction ran
    ``alone`` (no load or other eviction moved the RSS meanwhile, so what it did not give back
    is its own, on the heap). Under churn an eviction is rarely alone: the heap's free blocks
    then serve the next loads instead (glibc's ``mallinfo2``, which could say how much the heap
    holds free, walks the heap under the same locks as a trim)."""
    if cycles:
        gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if alone and trim is not None:
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
