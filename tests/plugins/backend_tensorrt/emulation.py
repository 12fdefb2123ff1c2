"""A CPU emulation of the parts of TensorRT and the CUDA runtime the backend calls.

"Device" and "pinned" memory are ordinary host buffers (ctypes), copies are ``memmove``, and an
engine computes ``OUTPUT0 = 2 * INPUT0`` and ``OUTPUT1 = INPUT1 + 1`` (INT32 in, INT64 out)
from the addresses bound to it. With :func:`installed`, the real backend code (buffers, copies,
profile choice, shapes, output reshapes) runs unchanged on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from .fakes import FakeEngine, Member, batch_engine

_DTYPES = {"FLOAT": np.float32, "INT32": np.int32, "INT64": np.int64, "HALF": np.float16}


class _Enum:
    def __init__(self, **members: Any) -> None:
        self.__dict__.update(members)


class FakeCudaRuntime:
    """``cuda.bindings.runtime`` over host memory; records every call."""

    cudaError_t = _Enum(cudaSuccess=0, cudaErrorMemoryAllocation=2)
    cudaMemcpyKind = _Enum(cudaMemcpyHostToDevice=1, cudaMemcpyDeviceToHost=2)

    def __init__(self, gpus: int = 1) -> None:
        self.gpus = gpus
        self.blocks: dict[int, Any] = {}
        self.calls: list[str] = []
        self.device = 0

    def _alloc(self, size: int) -> tuple[int, int]:
        block = ctypes.create_string_buffer(size)
        address = ctypes.addressof(block)
        self.blocks[address] = block
        return 0, address

    def cudaMalloc(self, size: int) -> tuple[int, int]:
        self.calls.append("malloc")
        return self._alloc(size)

    def cudaMallocHost(self, size: int) -> tuple[int, int]:
        self.calls.append("mallochost")
        return self._alloc(size)

    def cudaFree(self, ptr: int) -> tuple[int]:
        self.blocks.pop(ptr)
        return (0,)

    cudaFreeHost = cudaFree

    def cudaMemcpyAsync(self, dst: int, src: int, n: int, kind: int, stream: Any) -> tuple[int]:
        self.calls.append("h2d" if kind == 1 else "d2h")
        ctypes.memmove(dst, src, n)
        return (0,)

    def cudaStreamCreate(self) -> tuple[int, int]:
        return 0, 7

    def cudaStreamSynchronize(self, stream: Any) -> tuple[int]:
        return (0,)

    def cudaStreamDestroy(self, stream: Any) -> tuple[int]:
        return (0,)

    def cudaSetDevice(self, device: int) -> tuple[int]:
        self.device = device
        return (0,)

    def cudaGetDeviceCount(self) -> tuple[int, int]:
        return (0, self.gpus) if self.gpus else (35, 0)

    def cudaGetDeviceProperties(self, device: int) -> tuple[int, Any]:
        return 0, types.SimpleNamespace(major=9, minor=0)

    def cudaGetErrorName(self, err: int) -> tuple[int, bytes]:
        return 0, b"cudaErrorInsufficientDriver" if err == 35 else b"cudaErrorUnknown"


def _read(address: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    buf = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(address)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


class FakeContext:
    def __init__(self, engine: ComputeEngine) -> None:
        self.engine = engine
        self.profile = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}

    def set_optimization_profile_async(self, profile: int, stream: int) -> bool:
        self.profile = profile
        return True

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        low, _, high = self.engine.tensors[name].profiles[self.profile]
        ok = len(shape) == len(low) and all(lo <= s <= hi for lo, s, hi in zip(low, shape, high, strict=True))
        if ok:
            self.shapes[name] = tuple(shape)
        return ok

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        batch = self.shapes["INPUT0"][0]
        return (batch, 4) if name == "OUTPUT0" else (batch,)

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.addresses[name] = address
        return True

    def execute_async_v3(self, stream: int) -> bool:
        self.engine.executions.append(self.profile)
        x = _read(self.addresses["INPUT0"], np.float32, self.shapes["INPUT0"])
        y = _read(self.addresses["INPUT1"], np.int32, self.shapes["INPUT1"])
        _read(self.addresses["OUTPUT0"], np.float32, x.shape)[...] = 2 * x
        _read(self.addresses["OUTPUT1"], np.int64, y.shape)[...] = y.astype(np.int64) + 1
        return True


class ComputeEngine(FakeEngine):
    """The fakes' batch engine (two profiles: batches 1..8 and 4..16) that can also execute."""

    def __init__(self) -> None:
        base = batch_engine()
        super().__init__(list(base.tensors.values()), base.num_optimization_profiles)
        self.executions: list[int] = []

    def create_execution_context(self, strategy: Any = None) -> FakeContext:
        return FakeContext(self)


def fake_tensorrt(engines: list[ComputeEngine]) -> types.ModuleType:
    """A ``tensorrt`` module whose runtime deserializes any plan into a new :class:`ComputeEngine`."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.99-emulated"

    class Logger:
        WARNING = 2

        def __init__(self, level: int) -> None:
            self.level = level

    class Runtime:
        def __init__(self, logger: Logger) -> None:
            self.logger = logger

        def deserialize_cuda_engine(self, plan: bytes) -> ComputeEngine | None:
            if not plan.startswith(b"EMULATED"):
                return None
            engine = ComputeEngine()
            engines.append(engine)
            return engine

    trt.Logger = Logger
    trt.Runtime = Runtime
    trt.ExecutionContextAllocationStrategy = _Enum(
        STATIC=Member("STATIC"), ON_PROFILE_CHANGE=Member("ON_PROFILE_CHANGE")
    )
    return trt


@contextlib.contextmanager
def installed(gpus: int = 1) -> Iterator[tuple[FakeCudaRuntime, list[ComputeEngine]]]:
    """Install the emulated ``tensorrt`` and CUDA runtime for the backend; restore afterwards."""
    from inferd.lifecycle import builder
    from inferd_backend_tensorrt import cuda
    from inferd_backend_tensorrt import runtime as trt_runtime

    engines: list[ComputeEngine] = []
    runtime = FakeCudaRuntime(gpus)
    saved = (sys.modules.get("tensorrt"), cuda._rt, trt_runtime.Logger.instance)
    sys.modules["tensorrt"] = fake_tensorrt(engines)
    cuda._rt, trt_runtime.Logger.instance = runtime, None
    # The server validates a config's GPU ids against the GPUs the driver shows: these ones.
    visible_gpus, builder.visible_gpus = builder.visible_gpus, lambda: list(range(gpus))
    try:
        yield runtime, engines
    finally:
        builder.visible_gpus = visible_gpus
        if saved[0] is None:
            sys.modules.pop("tensorrt", None)
        else:
            sys.modules["tensorrt"] = saved[0]
        cuda._rt, trt_runtime.Logger.instance = saved[1], saved[2]
