"""One TensorRT instance: execution contexts (one per usable profile), a stream and buffers.

``run`` (called by :class:`~inferd.contracts.backend.ArrayInstance` with the batch's inputs) picks the profile
that fits the input shapes, sets each input's shape and address, binds every output, enqueues
with ``execute_async_v3`` on the instance's stream and copies the outputs back. Inputs and outputs
go through pinned host buffers unless the config turns ``optimization.input_pinned_memory`` /
``output_pinned_memory`` off; device and pinned buffers grow to the largest tensor seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.api import ArrayInstance, InstanceSpec, InternalError, InvalidArgument, numpy_dtype
from inferd_backend_tensorrt import cuda, runtime
from inferd_backend_tensorrt.engine import choose_profile

if TYPE_CHECKING:
    from inferd.api import ModelLoadContext
    from inferd_backend_tensorrt.engine import EngineInfo
    from inferd_backend_tensorrt.options import TensorRTOptions


class TensorRTInstance(ArrayInstance):
    """Runs one engine on one GPU, never concurrently with itself."""

    def __init__(
        self,
        context: ModelLoadContext,
        options: TensorRTOptions,
        info: EngineInfo,
        engine: Any,
        spec: InstanceSpec,
        profiles: list[int],
    ) -> None:
        """``engine``: an ``ICudaEngine`` on GPU ``spec.device_id``, described by ``info``;
        ``profiles``: the optimization profiles this instance may use."""
        config = context.config
        super().__init__(context.name, context.version, config.max_batch_size)
        self.info = info
        self.engine = engine
        self.device = spec.device_id
        self.profiles = profiles
        self.pinned_inputs = options.pinned_inputs
        self.pinned_outputs = options.pinned_outputs
        self.dtypes = {t.name: numpy_dtype(t.datatype or "") for t in self.info.tensors}
        self.inputs = [t.name for t in self.info.inputs]
        self.outputs = [t.name for t in self.info.outputs]
        #: Outputs the config declares (an engine may have more): only these are returned.
        self.declared = {o.name for o in config.output}
        #: Outputs whose config dims differ from the engine's shape (``reshape`` in the config).
        self.reshapes = {o.name: tuple(o.dims) for o in config.output if o.HasField("reshape")}
        cuda.set_device(self.device)
        self.stream = cuda.Stream()
        self.device_buffers = {t.name: cuda.DeviceBuffer() for t in self.info.tensors}
        self.host_buffers = {t.name: cuda.PinnedBuffer() for t in self.info.tensors}
        trt = runtime.import_tensorrt(context.name)
        strategy = getattr(trt.ExecutionContextAllocationStrategy, options.allocation_strategy)
        self.contexts: dict[int, Any] = {}
        for p in profiles:
            execution = engine.create_execution_context(strategy)
            if execution is None:
                raise InternalError(f"model '{self.model_name}': TensorRT could not create an execution context")
            if self.info.num_profiles > 1 or p != 0:
                execution.set_optimization_profile_async(p, self.stream.handle)
            self.contexts[p] = execution
        self.stream.synchronize()

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        cuda.set_device(self.device)
        arrays = {name: self._input_array(name, inputs) for name in self.inputs}
        shapes = {name: tuple(a.shape) for name, a in arrays.items()}
        profile = (
            self.profiles[0]
            if len(self.profiles) == 1
            else choose_profile(self.info, self.profiles, shapes, self.model_name)
        )
        context = self.contexts[profile]
        for name, array in arrays.items():
            if not context.set_input_shape(name, shapes[name]):
                choose_profile(self.info, [profile], shapes, self.model_name)  # raises with the ranges
                raise InvalidArgument(
                    f"model '{self.model_name}': TensorRT refused shape {list(shapes[name])} for input '{name}'"
                )
            context.set_tensor_address(name, self._upload(name, array))
        out_shapes = {}
        for name in self.outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise InvalidArgument(
                    f"model '{self.model_name}': output '{name}' has a data-dependent shape {list(shape)}, "
                    f"which inferd's TensorRT backend does not support"
                )
            out_shapes[name] = shape
            nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtypes[name].itemsize
            context.set_tensor_address(name, self.device_buffers[name].ensure(nbytes))
        if not context.execute_async_v3(self.stream.handle):
            raise InternalError(f"model '{self.model_name}': TensorRT execute_async_v3 failed (see the log)")
        results = {name: self._download(name, shape) for name, shape in out_shapes.items()}
        self.stream.synchronize()
        return self._finish(results)

    def _input_array(self, name: str, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        try:
            array = inputs[name]
        except KeyError:
            raise InvalidArgument(f"model '{self.model_name}': the engine needs input '{name}'") from None
        return np.ascontiguousarray(array, dtype=self.dtypes[name])

    def _upload(self, name: str, array: np.ndarray) -> int:
        """Start copying ``array`` to the device; return the device address."""
        nbytes = array.nbytes
        dst = self.device_buffers[name].ensure(nbytes)
        if nbytes == 0:
            return dst
        if self.pinned_inputs:
            host = self.host_buffers[name]
            np.copyto(host.view(nbytes, array.dtype, array.shape), array)
            cuda.copy_to_device(dst, host.ptr, nbytes, self.stream)
        else:  # pageable source: ``run`` holds the array until the stream is synchronized
            cuda.copy_to_device(dst, array.ctypes.data, nbytes, self.stream)
        return dst

    def _download(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Start copying an output to the host; the array is valid after the stream syncs."""
        dtype = self.dtypes[name]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self.pinned_outputs:
            host = self.host_buffers[name]
            view = host.view(nbytes, dtype, shape)
            if nbytes:
                cuda.copy_to_host(host.ptr, self.device_buffers[name].ptr, nbytes, self.stream)
            return view
        out = np.empty(shape, dtype=dtype)
        if nbytes:
            cuda.copy_to_host(out.ctypes.data, self.device_buffers[name].ptr, nbytes, self.stream)
        return out

    def _finish(self, results: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Copy pinned views out (the buffers are reused) and apply the config's output reshapes."""
        out = {}
        batch = self.max_batch_size > 0
        for name, array in results.items():
            if name not in self.declared:
                continue
            if self.pinned_outputs:
                array = array.copy()
            dims = self.reshapes.get(name)
            if dims is not None:
                array = array.reshape(((array.shape[0],) if batch else ()) + dims)
            out[name] = array
        return out

    def close(self) -> None:
        cuda.set_device(self.device)
        self.stream.synchronize()
        self.contexts.clear()
        for device_buffer in self.device_buffers.values():
            device_buffer.free()
        for host_buffer in self.host_buffers.values():
            host_buffer.free()
        self.stream.close()
        self.engine = None
