"""A CUDA shared-memory region: device memory of another process, opened from its CUDA IPC handle.

cuda-python (``cuda.bindings.runtime``, or the older ``cuda.cudart``) is imported on first use
only: a server that never sees a CUDA region never imports it. Backends compute on host arrays,
so an input is copied from the device once (into a host array the backend reads) and an output
is copied to the device once, from the tensor the backend produced.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import logging
import threading
from types import ModuleType
from typing import Any

import numpy as np

from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument

log = logging.getLogger(__name__)

#: Bytes of a ``cudaIpcMemHandle_t``.
IPC_HANDLE_SIZE = 64
_MODULES = ("cuda.bindings.runtime", "cuda.cudart")
_DRIVER_MODULES = ("cuda.bindings.driver", "cuda.cuda")


def _find_runtime() -> str | None:
    """The cuda-python runtime module installed here, without importing it."""
    for name in _MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:
            continue
    return None


@functools.cache
def unusable_reason() -> str | None:
    """Why CUDA shared memory cannot work in this process (``None``: it can). Imports
    cuda-python only when it is installed; answered once."""
    name = _find_runtime()
    if name is None:
        return "the 'cuda-python' package is not installed (pip install cuda-python)"
    try:
        rt = importlib.import_module(name)
        err, count = rt.cudaGetDeviceCount()
    except Exception as exc:  # a broken driver install raises from the import
        return f"the CUDA runtime did not start: {type(exc).__name__}: {exc}"
    if err != rt.cudaError_t.cudaSuccess or count == 0:
        return "no CUDA device is visible to the server"
    return None


def runtime(name: str) -> ModuleType:
    """cuda-python's runtime module; raises Triton's 'GPUs not supported' error for region
    ``name`` when CUDA cannot be used."""
    why = unusable_reason()
    if why is not None:
        raise InvalidArgument(f"failed to register CUDA shared memory region: '{name}', GPUs not supported; {why}")
    module = _find_runtime()
    assert module is not None
    return importlib.import_module(module)


def _check(rt: ModuleType, result: tuple[Any, ...], what: str) -> Any:
    """The value of a cuda-python call; a CUDA error raises, naming ``what`` failed."""
    err = result[0]
    if err != rt.cudaError_t.cudaSuccess:
        _, text = rt.cudaGetErrorString(err)
        raise InferdError(f"{what}: {text.decode() if isinstance(text, bytes) else text}", ErrorKind.INTERNAL)
    return result[1] if len(result) > 1 else None


def allocation_bytes(pointer: int) -> int | None:
    """The bytes of device memory from ``pointer`` to the end of its allocation, as the CUDA
    driver tells (``cuMemGetAddressRange``); ``None`` when that cannot be known here."""
    for module in _DRIVER_MODULES:
        try:
            driver = importlib.import_module(module)
            err, base, size = driver.cuMemGetAddressRange(driver.CUdeviceptr(pointer))
        except Exception:  # not installed, or an older API: the size stays unknown
            continue
        if err != driver.CUresult.CUDA_SUCCESS:
            return None
        return int(base) + int(size) - pointer
    return None


class CudaRegion:
    """``byte_size`` bytes of device memory on GPU ``device_id``, opened from a CUDA IPC handle."""

    kind = "cuda"

    def __init__(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        rt = runtime(name)
        if len(raw_handle) != IPC_HANDLE_SIZE:
            raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        handle = rt.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), raw_handle, IPC_HANDLE_SIZE)
        try:
            _check(rt, rt.cudaSetDevice(device_id), f"cannot use GPU {device_id}")
            flags = rt.cudaIpcMemLazyEnablePeerAccess
            self.pointer = int(_check(rt, rt.cudaIpcOpenMemHandle(handle, flags), "failed to open CUDA IPC handle"))
        except InferdError as exc:
            raise InvalidArgument(f"failed to register CUDA shared memory region '{name}': {exc.message}") from None
        held = allocation_bytes(self.pointer)
        if held is not None and byte_size > held:
            rt.cudaIpcCloseMemHandle(self.pointer)
            raise InvalidArgument(
                f"failed to register CUDA shared memory region '{name}': invalid args; byte_size {byte_size} is "
                f"more than the {held} bytes of device memory the IPC handle opens"
            )
        self.rt = rt
        self.raw_handle = bytes(raw_handle)
        self.name = name
        self.device_id = device_id
        self.byte_size = byte_size
        #: Held while copying or counting, so that closing never races a copy.
        self.lock = threading.Lock()
        #: Output sinks alive (requests in flight): the handle is closed once none is left.
        self.sinks = 0
        self.unregistered = False
        self.closed = False

    def status(self) -> dict[str, Any]:
        """Triton's status entry of the region."""
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def input(self, offset: int, byte_size: int) -> memoryview:
        """The bytes at ``offset``, copied from the device into a new host buffer."""
        host = np.empty(byte_size, np.uint8)
        self.copy(host.ctypes.data, self.pointer + offset, byte_size)
        return host.data  # the array's buffer: a memoryview

    def output(self, offset: int, byte_size: int) -> DeviceSink:
        """Where an output of up to ``byte_size`` bytes at ``offset`` is written; the handle
        stays open while the sink lives."""
        with self.lock:
            self.sinks += 1
        return DeviceSink(self, offset)

    def copy(self, dst: int, src: int, size: int) -> None:
        """``cudaMemcpy`` of ``size`` bytes (either way: unified addressing tells which)."""
        rt = self.rt
        with self.lock:
            if self.closed:
                raise InferdError(f"CUDA shared memory region '{self.name}' was unregistered", ErrorKind.UNAVAILABLE)
            _check(rt, rt.cudaSetDevice(self.device_id), f"cannot use GPU {self.device_id}")
            kind = rt.cudaMemcpyKind.cudaMemcpyDefault
            _check(rt, rt.cudaMemcpy(dst, src, size, kind), f"CUDA copy for region '{self.name}' failed")

    def close(self) -> None:
        """Unregistered: close the IPC mapping now, or when the last request in flight is done
        with it (the exporting process still owns the memory)."""
        with self.lock:
            self.unregistered = True
            if self.sinks == 0:
                self._close_handle()

    def sink_done(self) -> None:
        with self.lock:
            self.sinks -= 1
            if self.unregistered and self.sinks == 0:
                self._close_handle()

    def _close_handle(self) -> None:
        if not self.closed:
            self.closed = True
            _check(self.rt, self.rt.cudaIpcCloseMemHandle(self.pointer), "failed to close CUDA IPC handle")


class DeviceSink:
    """Writes an output's bytes into a CUDA region at one offset."""

    __slots__ = ("region", "offset")

    def __init__(self, region: CudaRegion, offset: int) -> None:
        self.region = region
        self.offset = offset

    def write(self, data: bytes | memoryview) -> None:
        size = len(data)
        if size:
            host = np.frombuffer(data, np.uint8)
            self.region.copy(self.region.pointer + self.offset, host.ctypes.data, size)

    def __del__(self) -> None:
        try:
            self.region.sink_done()
        except InferdError as exc:  # nothing to answer any more: log it
            log.error("%s", exc.message)
