"""inferd.shared_memory on real /dev/shm objects: regions, tensors in them, workers' broadcast."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from collections.abc import Callable, Iterator
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import pytest

from inferd.contracts.errors import ErrorKind, InferdError
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.shared_memory import Regions, SharedMemory, bind_outputs, read_input
from inferd.shared_memory.cuda import unusable_reason
from inferd.shared_memory.system import shm_path
from inferd.workers.shared_memory import ClusterSharedMemory

_n = itertools.count()


@pytest.fixture
def make() -> Iterator[Callable[[int], tuple[str, shared_memory.SharedMemory]]]:
    """``make(size) -> (key, block)``: a zeroed /dev/shm object, removed after the test."""
    blocks: list[shared_memory.SharedMemory] = []

    def new(size: int) -> tuple[str, shared_memory.SharedMemory]:
        name = f"inferd_unit_{os.getpid()}_{next(_n)}"
        blocks.append(shared_memory.SharedMemory(name, create=True, size=size))
        return "/" + name, blocks[-1]

    yield new
    for block in blocks:
        block.close()
        block.unlink()


def params(region: str, byte_size: int, offset: int = 0) -> dict[str, Any]:
    return {"shared_memory_region": region, "shared_memory_byte_size": byte_size, "shared_memory_offset": offset}


def test_an_input_is_a_view_of_the_region(make: Any) -> None:
    key, block = make(64)
    regions = Regions()
    regions.register_system("r", key, 16, 32)  # the region is bytes 16..48 of the object
    values = np.arange(4, dtype=np.int32)
    block.buf[24:40] = values.tobytes()
    array = read_input(regions, "m", "X", "INT32", (2, 2), params("r", 16, offset=8))
    np.testing.assert_array_equal(array, values.reshape(2, 2))
    block.buf[24:28] = np.int32(99).tobytes()  # the client writes: the array sees it (no copy was made)
    assert array[0, 0] == 99


def test_outputs_are_written_into_the_region(make: Any) -> None:
    key, block = make(32)
    regions = Regions()
    regions.register_system("out", key, 0, 32)
    request = InferRequest("m", "", "")
    request.outputs = [RequestedOutput("Y", params("out", 16, offset=8)), RequestedOutput("Z")]
    sinks = bind_outputs(request, regions)
    assert sinks is not None and "Y" in sinks and "Z" not in sinks
    y = np.array([1.5, -2.0, 3.0, 4.0], np.float32)
    response = InferResponse("m", "1", "", [InferTensor.from_array("Y", y), InferTensor.from_array("Z", y)])
    sinks.write(response)
    np.testing.assert_array_equal(np.frombuffer(block.buf[8:24], np.float32), y)
    assert bytes(block.buf[:8]) == bytes(8) and bytes(block.buf[24:]) == bytes(8)


def test_requests_without_regions_bind_nothing() -> None:
    request = InferRequest("m", "", "")
    request.outputs = [RequestedOutput("Y", {"binary_data": True})]
    assert bind_outputs(request, Regions()) is None


def test_an_output_larger_than_its_room_fails(make: Any) -> None:
    key, block = make(16)
    regions = Regions()
    regions.register_system("out", key, 0, 16)
    request = InferRequest("m", "", "")
    request.outputs = [RequestedOutput("Y", params("out", 8))]
    sinks = bind_outputs(request, regions)
    assert sinks is not None
    with pytest.raises(InferdError) as info:
        sinks.write(InferResponse("m", "1", "", [InferTensor.from_array("Y", np.zeros(4, np.float32))]))
    assert info.value.kind is ErrorKind.INTERNAL
    assert "(8 bytes) should be at least 16 bytes to hold the results" in info.value.message


def test_bounds_and_names(make: Any) -> None:
    key, _ = make(32)
    regions = Regions()
    regions.register_system("r", key, 0, 32)
    with pytest.raises(InferdError, match="already in manager") as info:
        regions.register_system("r", key, 0, 32)
    assert info.value.kind is ErrorKind.ALREADY_EXISTS
    regions.register_system("same-key", key, 0, 16)  # Triton 2.51 fails this one; inferd allows it
    for offset, size, sentence in ((32, 4, "Invalid offset for"), (16, 20, "Invalid offset + byte size"),
                                   (0, 0, "Invalid offset + byte size")):  # fmt: skip
        with pytest.raises(InferdError, match=re.escape(sentence)):
            regions.checked("r", offset, size)
    with pytest.raises(InferdError, match="Unable to find shared memory region: 'x'") as info:
        regions.checked("x", 0, 4)
    assert info.value.kind is ErrorKind.NOT_FOUND
    assert regions.checked("r", 28, 4) is regions.checked("r", 0, 32)


@pytest.mark.parametrize("key", ["/../etc/passwd", "a/b", "/", "..", "//x/y"])
def test_keys_name_only_objects_in_dev_shm(key: str) -> None:
    with pytest.raises(InferdError, match="Unable to open shared memory region") as info:
        shm_path("r", key)
    assert info.value.kind is ErrorKind.INTERNAL


def test_unregister_keeps_arrays_in_flight_readable(make: Any) -> None:
    key, block = make(16)
    block.buf[:16] = np.arange(4, dtype=np.float32).tobytes()
    regions = Regions()
    regions.register_system("r", key, 0, 16)
    array = read_input(regions, "m", "X", "FP32", (4,), params("r", 16))
    regions.unregister("system", "r")
    assert len(regions) == 0
    np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32))  # the mapping outlives the region


def test_unregister_all_of_one_kind(make: Any) -> None:
    regions = Regions()
    for name in ("a", "b"):
        regions.register_system(name, make(8)[0], 0, 8)
    regions.unregister("cuda")
    assert [r["name"] for r in regions.status("system")] == ["a", "b"]
    regions.unregister("system")
    assert regions.status("system") == []


class LocalPeer:
    """The other worker of a two-worker server, answering in this process."""

    def __init__(self) -> None:
        self.shm = ClusterSharedMemory(NoPeers())

    async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]:
        assert op == ClusterSharedMemory.OP and args is not None
        return [self.shm.apply(args)]


class NoPeers:
    """A worker with no other worker."""

    async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]:
        return []


def test_registrations_apply_to_every_worker(make: Any) -> None:
    peer = LocalPeer()
    mine = ClusterSharedMemory(peer)
    key, _ = make(16)
    asyncio.run(mine.register_system("r", key, 4, 8))
    assert (
        peer.shm.status("system") == mine.status("system") == [{"name": "r", "key": key, "offset": 4, "byte_size": 8}]
    )
    restarted = ClusterSharedMemory(NoPeers())
    restarted.catch_up(mine.state())
    assert restarted.status("system") == mine.status("system")
    asyncio.run(mine.unregister("system", "r"))
    assert peer.shm.status("system") == []


def test_a_peer_refusing_undoes_the_registration(make: Any) -> None:
    peer = LocalPeer()
    mine = ClusterSharedMemory(peer)
    key, _ = make(16)
    asyncio.run(peer.shm.register_system("r", key, 0, 16))  # the peer already has the name: it refuses
    mine.regions.unregister("system")
    with pytest.raises(InferdError, match="already in manager"):
        asyncio.run(mine.register_system("r", key, 0, 8))
    assert mine.status("system") == [] and peer.shm.status("system") == []


@pytest.mark.skipif(unusable_reason() is None, reason="CUDA works here")
def test_cuda_is_not_listed_without_a_gpu() -> None:
    assert SharedMemory().extensions() == ["system_shared_memory"]
    with pytest.raises(InferdError, match="GPUs not supported"):
        Regions().register_cuda("g", b"\0" * 64, 0, 8)
