"""What an eviction does to give memory back (:mod:`inferd.lifecycle.reclaim`): a full collection
only when the evicted version's objects outlive it, a heap trim only when it ran alone, and an RSS
reading trusted only when no other load or eviction moved it."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import sys
from collections.abc import Iterator

import pytest

from inferd.lifecycle.budget import rss_bytes
from inferd.lifecycle.reclaim import MemoryChanges, collected, reclaim, references

MB = 1 << 20
glibc = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="malloc_trim is glibc's")


class _Version:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only a collection frees it


class _Plain:
    """An object no cycle holds: its last reference frees it."""


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """How many full (generation 2) collections ran meanwhile; the automatic ones are off, so that
    only what the code under test asks for runs (a young collection would free a cycle early)."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)
        if was_enabled:
            gc.enable()


def test_an_eviction_whose_objects_are_gone_runs_no_collection(full_collections: list[int]) -> None:
    reclaim(cycles=False, alone=True)
    assert full_collections == []


def test_objects_a_cycle_keeps_are_collected(full_collections: list[int]) -> None:
    refs = references([_Version()])
    assert not asyncio.run(collected(refs, timeout=0.02))  # the cycle keeps it past its last name
    reclaim(cycles=True, alone=False)
    assert full_collections and asyncio.run(collected(refs, timeout=0.02))


def test_collected_waits_for_the_last_reference_to_go() -> None:
    version = _Plain()
    refs = references([version, 3])  # (an int takes no weak reference: left out)
    assert len(refs) == 1

    async def drop_later() -> bool:
        asyncio.get_running_loop().call_later(0.01, lambda: holder.clear())
        return await collected(refs, timeout=2)

    holder = [version]
    del version
    assert asyncio.run(drop_later())


@glibc
@pytest.mark.skipif(sys.platform != "linux", reason="RSS from /proc")
def test_the_heap_is_trimmed_only_after_an_eviction_that_ran_alone() -> None:
    # 128 MiB in blocks malloc keeps on its heap (more than a test process holds free there: the
    # first are carved from that, the rest grow the heap); the last one stays, so the heap's top
    # cannot shrink on its own
    blocks = [bytes(4000) for _ in range(32_000)]
    blocks.append(bytes(4000))
    del blocks[:-1]
    before = rss_bytes()
    reclaim(cycles=False, alone=False)  # others moved the RSS too: what is free may be theirs to reuse
    assert before - rss_bytes() < 16 * MB, (before - rss_bytes()) / MB
    reclaim(cycles=False, alone=True)
    assert before - rss_bytes() >= 32 * MB, (before - rss_bytes()) / MB


def test_a_change_is_alone_only_if_none_ran_beside_it() -> None:
    changes = MemoryChanges()
    with changes.change() as alone:
        assert alone()
    with changes.change() as first:
        with changes.change() as second:
            assert not second()  # the first was under way when it began
        assert not first()  # another began meanwhile
    with changes.change() as later:
        assert later()  # both ended before it began
