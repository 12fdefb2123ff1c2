"""CUDA regions on a stand-in for cuda-python's runtime, so that the code runs without a GPU.

The stand-in keeps "device" memory in host buffers (a device pointer is the buffer's address and
``cudaMemcpy`` a ``memmove``) and maps IPC handles to buffers, with cuda-python's call shapes:
every call returns ``(error, value...)``. The real thing runs in
tests/e2e/test_shared_memory.py::test_cuda_inputs_and_outputs_on_the_gpu where a GPU is present.
"""

from __future__ import annotations

import asyncio
import ctypes
import enum
import types
from typing import Any

import numpy as np
import pytest

from inferd.contracts.errors import ErrorKind, InferdError
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.shared_memory import Regions, bind_outputs, cuda, read_input
from inferd.workers.shared_memory import ClusterSharedMemory


class FakeRuntime(types.SimpleNamespace):
    """What CudaRegion uses of ``cuda.bindings.runtime``."""

    def __init__(self) -> None:
        err = enum.Enum("cudaError_t", {"cudaSuccess": 0, "cudaErrorInvalidValue": 1})
        kind = enum.Enum("cudaMemcpyKind", {"cudaMemcpyDefault": 4})
        super().__init__(cudaError_t=err, cudaMemcpyKind=kind, cudaIpcMemLazyEnablePeerAccess=1)
        self.exported: dict[bytes, ctypes.Array[ctypes.c_char]] = {}
        self.opened: set[int] = set()
        self.devices: list[int] = []

    def export(self, size: int) -> tuple[bytes, ctypes.Array[ctypes.c_char]]:
        """Device memory of another process, and its IPC handle."""
        buffer = ctypes.create_string_buffer(size)
        handle = bytes([len(self.exported) + 1]) * cuda.IPC_HANDLE_SIZE
        self.exported[handle] = buffer
        return handle, buffer

    def cudaGetDeviceCount(self) -> tuple[Any, int]:
        return self.cudaError_t.cudaSuccess, 1

    def cudaGetErrorString(self, err: Any) -> tuple[Any, bytes]:
        return self.cudaError_t.cudaSuccess, f"error {err.name}".encode()

    def cudaIpcMemHandle_t(self) -> Any:
        storage = ctypes.create_string_buffer(cuda.IPC_HANDLE_SIZE)
        return types.SimpleNamespace(storage=storage, getPtr=lambda: ctypes.addressof(storage))

    def cudaSetDevice(self, device: int) -> tuple[Any]:
        self.devices.append(device)
        return (self.cudaError_t.cudaSuccess if device == 0 else self.cudaError_t.cudaErrorInvalidValue,)

    def cudaIpcOpenMemHandle(self, handle: Any, flags: int) -> tuple[Any, int]:
        buffer = self.exported.get(handle.storage.raw)
        if buffer is None or flags != 1:
            return self.cudaError_t.cudaErrorInvalidValue, 0
        self.opened.add(ctypes.addressof(buffer))
        return self.cudaError_t.cudaSuccess, ctypes.addressof(buffer)

    def cudaMemcpy(self, dst: int, src: int, size: int, kind: Any) -> tuple[Any]:
        assert kind is self.cudaMemcpyKind.cudaMemcpyDefault
        ctypes.memmove(dst, src, size)
        return (self.cudaError_t.cudaSuccess,)

    def cudaIpcCloseMemHandle(self, pointer: int) -> tuple[Any]:
        self.opened.discard(pointer)
        return (self.cudaError_t.cudaSuccess,)


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    fake = FakeRuntime()
    monkeypatch.setattr(cuda, "unusable_reason", lambda: None)
    monkeypatch.setattr(cuda, "runtime", lambda name: fake)
    return fake


def shm_params(region: str, size: int, offset: int = 0) -> dict[str, Any]:
    return {"shared_memory_region": region, "shared_memory_byte_size": size, "shared_memory_offset": offset}


def test_inputs_come_from_the_device_and_outputs_go_to_it(rt: FakeRuntime) -> None:
    handle, device = rt.export(64)
    x = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    ctypes.memmove(ctypes.addressof(device) + 8, x.ctypes.data, 16)
    regions = Regions()
    regions.register_cuda("g", handle, 0, 64)
    assert regions.status("cuda") == [{"name": "g", "device_id": 0, "byte_size": 64}]
    array = read_input(regions, "m", "X", "FP32", (4,), shm_params("g", 16, offset=8))
    np.testing.assert_array_equal(array, x)
    ctypes.memset(ctypes.addressof(device) + 8, 0, 16)  # the input was copied to the host: unchanged
    np.testing.assert_array_equal(array, x)

    request = InferRequest("m", "", "")
    request.outputs = [RequestedOutput("Y", shm_params("g", 16, offset=32))]
    sinks = bind_outputs(request, regions)
    assert sinks is not None
    sinks.write(InferResponse("m", "1", "", [InferTensor.from_array("Y", x * 2)]))
    np.testing.assert_array_equal(np.frombuffer(device.raw[32:48], np.float32), x * 2)

    # Unregistered while a request holds a sink: the request still writes; the handle closes after.
    regions.unregister("cuda", "g")
    assert regions.status("cuda") == [] and rt.opened
    sinks.write(InferResponse("m", "1", "", [InferTensor.from_array("Y", x * 3)]))
    np.testing.assert_array_equal(np.frombuffer(device.raw[32:48], np.float32), x * 3)
    del sinks
    assert rt.opened == set()


def test_an_unregistered_region_without_requests_closes_at_once(rt: FakeRuntime) -> None:
    handle, _ = rt.export(16)
    regions = Regions()
    regions.register_cuda("g", handle, 0, 16)
    region = regions.checked("g", 0, 16)
    regions.unregister("cuda")
    assert rt.opened == set()
    with pytest.raises(InferdError, match="was unregistered") as info:
        region.input(0, 16)
    assert info.value.kind is ErrorKind.UNAVAILABLE


def test_register_failures_name_the_region(rt: FakeRuntime) -> None:
    handle, _ = rt.export(16)
    regions = Regions()
    with pytest.raises(InferdError, match="'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"):
        regions.register_cuda("short", handle[:10], 0, 16)
    with pytest.raises(InferdError, match="failed to register CUDA shared memory region 'bad': failed to open"):
        regions.register_cuda("bad", b"\xff" * cuda.IPC_HANDLE_SIZE, 0, 16)
    with pytest.raises(InferdError, match="failed to register CUDA shared memory region 'gpu7': cannot use GPU 7"):
        regions.register_cuda("gpu7", handle, 7, 16)
    assert regions.status("cuda") == []


def test_cuda_regions_reach_every_worker(rt: FakeRuntime) -> None:
    handle, device = rt.export(16)
    device.raw = b"\x01" * 16

    class Peer:
        def __init__(self) -> None:
            self.shm = ClusterSharedMemory(self)

        async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]:
            assert args is not None
            return [self.shm.apply(args)]

    peer = Peer()
    mine = ClusterSharedMemory(peer)
    assert "cuda_shared_memory" in mine.extensions()
    asyncio.run(mine.register_cuda("g", handle, 0, 16))
    assert peer.shm.status("cuda") == [{"name": "g", "device_id": 0, "byte_size": 16}]
    restarted = ClusterSharedMemory(Peer())
    restarted.catch_up(mine.state())
    got = read_input(restarted.regions, "m", "X", "UINT8", (16,), shm_params("g", 16))
    assert bytes(got) == b"\x01" * 16
    with pytest.raises(InferdError, match="registered as CUDA shared memory, not system shared memory"):
        mine.status("system", "g")
