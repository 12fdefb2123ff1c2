"""A thin layer over the CUDA runtime bindings of ``cuda-python``: devices, streams, buffers.

Only what the backend needs: device count and properties, a stream per instance, device buffers
and pinned host buffers that grow to the largest tensor seen, and asynchronous copies. The
bindings are imported on first use (``cuda.bindings.runtime``, or ``cuda.cudart`` in older
releases), so importing this module needs no CUDA.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from inferd.api import InternalError, Unavailable

INSTALL_HINT = "install inferd-backend-tensorrt[gpu] on a machine with an NVIDIA GPU"
_ALIGN = 256
_rt: Any = None


def runtime() -> Any:
    """The CUDA runtime bindings module; raises Unavailable when cuda-python is missing."""
    global _rt
    if _rt is None:
        try:
            from cuda.bindings import runtime as rt
        except ImportError:
            try:
                from cuda import cudart as rt  # type: ignore[no-redef, unused-ignore]  # cuda-python < 12.6
            except ImportError as exc:
                raise Unavailable(
                    f"the TensorRT backend needs the CUDA runtime bindings ('cuda-python'), which are not "
                    f"installed ({exc}); {INSTALL_HINT}"
                ) from None
        _rt = rt
    return _rt


def _error_name(rt: Any, err: Any) -> str:
    try:
        name = rt.cudaGetErrorName(err)[1]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return str(err)


def check(result: Any, what: str) -> Any:
    """Unpack ``(err, value...)`` from a binding call; raise InternalError when err is not success."""
    rt = runtime()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        raise InternalError(f"CUDA {what} failed: {_error_name(rt, err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def device_count() -> tuple[int, str]:
    """``(number of visible GPUs, reason when 0)``; never raises for a missing driver."""
    rt = runtime()
    err, *rest = rt.cudaGetDeviceCount()
    if err != rt.cudaError_t.cudaSuccess:
        return 0, f"cudaGetDeviceCount: {_error_name(rt, err)}"
    count = int(rest[0]) if rest else 0
    return count, "" if count else "cudaGetDeviceCount found no device"


def require_gpus(model: str) -> int:
    """The number of visible GPUs; raise Unavailable (naming the model) when there is none."""
    count, reason = device_count()
    if count == 0:
        raise Unavailable(
            f"model '{model}': no NVIDIA GPU is visible to this process ({reason}); TensorRT engines run only "
            f"on NVIDIA GPUs: {INSTALL_HINT}"
        )
    return count


def set_device(device: int) -> None:
    check(runtime().cudaSetDevice(device), f"cudaSetDevice({device})")


def compute_capability(device: int) -> str:
    """``"major.minor"`` of ``device`` (the key of config.pbtxt's ``cc_model_filenames``)."""
    props = check(runtime().cudaGetDeviceProperties(device), f"cudaGetDeviceProperties({device})")
    return f"{props.major}.{props.minor}"


class Stream:
    """A CUDA stream on the current device."""

    def __init__(self) -> None:
        self.stream = check(runtime().cudaStreamCreate(), "cudaStreamCreate")

    @property
    def handle(self) -> int:
        return int(self.stream)

    def synchronize(self) -> None:
        check(runtime().cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def close(self) -> None:
        if self.stream is not None:
            check(runtime().cudaStreamDestroy(self.stream), "cudaStreamDestroy")
            self.stream = None


def _round_up(nbytes: int) -> int:
    return max(_ALIGN, (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN)


class DeviceBuffer:
    """Device memory that grows (never shrinks) to the largest size asked for."""

    def __init__(self) -> None:
        self.ptr = 0
        self.capacity = 0

    def ensure(self, nbytes: int) -> int:
        if nbytes > self.capacity:
            self.free()
            size = _round_up(nbytes)
            self.ptr = int(check(runtime().cudaMalloc(size), f"cudaMalloc({size})"))
            self.capacity = size
        elif not self.ptr:
            return self.ensure(max(nbytes, 1))
        return self.ptr

    def free(self) -> None:
        if self.ptr:
            check(runtime().cudaFree(self.ptr), "cudaFree")
        self.ptr, self.capacity = 0, 0


class PinnedBuffer:
    """Page-locked host memory (fast, asynchronous copies) that grows like :class:`DeviceBuffer`."""

    def __init__(self) -> None:
        self.ptr = 0
        self.capacity = 0
        self._array: np.ndarray | None = None

    def ensure(self, nbytes: int) -> int:
        if nbytes > self.capacity or not self.ptr:
            self.free()
            size = _round_up(nbytes)
            self.ptr = int(check(runtime().cudaMallocHost(size), f"cudaMallocHost({size})"))
            self.capacity = size
            self._array = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(self.ptr))
        return self.ptr

    def view(self, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The first ``nbytes`` as an array of ``dtype`` and ``shape`` (no copy)."""
        self.ensure(nbytes)
        assert self._array is not None
        return self._array[:nbytes].view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            self._array = None
            check(runtime().cudaFreeHost(self.ptr), "cudaFreeHost")
        self.ptr, self.capacity = 0, 0


def copy_to_device(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    rt = runtime()
    kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
    check(rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream.stream), "cudaMemcpyAsync (host to device)")


def copy_to_host(dst: int, src: int, nbytes: int, stream: Stream) -> None:
    rt = runtime()
    kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
    check(rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream.stream), "cudaMemcpyAsync (device to host)")
