"""One execution context: numpy inputs -> torch tensors on the device -> forward -> numpy outputs."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from inferd.api import (
    ArrayInstance,
    InferdError,
    InternalError,
    InvalidArgument,
    config_to_wire,
    numpy_dtype,
)
from inferd_backend_pytorch.loading import error_summary

if TYPE_CHECKING:
    from inferd.api import ModelLoadContext
    from inferd_backend_pytorch.binding import InputPlan, OutputPlan
    from inferd_backend_pytorch.loading import LoadedModule
    from inferd_backend_pytorch.options import TorchOptions


# Wire arrays are read-only views of the request's bytes. torch.from_numpy shares them without a
# copy (as Triton's libtorch backend wraps its input buffers) and warns once that writing to such a
# tensor is undefined; a model that writes into its inputs would change only its own request's data.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)

_TORCH_TO_WIRE: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "UINT8",
    torch.int8: "INT8",
    torch.int16: "INT16",
    torch.int32: "INT32",
    torch.int64: "INT64",
    torch.float16: "FP16",
    torch.float32: "FP32",
    torch.float64: "FP64",
    torch.bfloat16: "BF16",
    torch.uint16: "UINT16",
    torch.uint32: "UINT32",
    torch.uint64: "UINT64",
}
#: Read-only arrays this small are copied: a copy costs nothing, and CPython shares 1-byte bytes objects.
_COPY_BELOW_BYTES = 64
#: Where a returned tensor sits: tuple/list indexes and dict keys from the top.
Path_ = tuple[str | int, ...]


class PyTorchInstance(ArrayInstance):
    """Runs ``forward`` for a batch; inputs are shared with numpy, not copied, on CPU."""

    def __init__(
        self,
        context: ModelLoadContext,
        options: TorchOptions,
        plan: InputPlan,
        outputs: OutputPlan,
        loaded: LoadedModule,
        device: torch.device | None,
    ) -> None:
        """``plan``: how config inputs become ``forward``'s arguments; ``outputs``: where its results
        hold the config outputs; ``loaded``: the module on ``device`` (None: where it was saved)."""
        config = context.config
        super().__init__(context.name, context.version, config.max_batch_size)
        self.module = loaded.module
        self.plan = plan
        self.outputs = outputs
        self.device = device
        self._grad_mode: Callable[[], Any] = torch.inference_mode if options.inference_mode else torch.no_grad
        self._setters = _execution_setters(options, loaded.torchscript, device)
        self._clean_cache = options.cache_cleaning and device is not None and device.type == "cuda"
        self._expected = {t.name: config_to_wire(_type_name(t)) for t in config.output}
        for state in config.sequence_batching.state:  # implicit state outputs the config may not list
            self._expected.setdefault(state.output_name, config_to_wire(_type_name(state)))
        self._what = f"model '{context.name}' version {context.version}"

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        rows = _rows(inputs) if self.max_batch_size > 0 else -1
        with self._grad_mode():
            for setter in self._setters:
                setter()
            result = self._forward(inputs)
            leaves = _flatten(result, (), [], self._what)
            indexes = self.outputs.resolve(tuple(path for path, _ in leaves))
            out = {
                name: self._array(name, leaves[i][1], rows) for name, i in zip(self.outputs.names, indexes, strict=True)
            }
        if self._clean_cache:
            torch.cuda.empty_cache()
        return out

    def _forward(self, inputs: Mapping[str, np.ndarray]) -> Any:
        plan = self.plan
        try:
            if plan.dict_input:
                return self.module({name: self._tensor(name, a) for name, a in inputs.items()})
            args = [self._tensor(n, inputs[n]) if n is not None and n in inputs else None for n in plan.positional]
            kwargs = {key: self._tensor(n, inputs[n]) for key, n in plan.keywords if n in inputs}
            return self.module(*args, **kwargs)
        except InferdError:
            raise
        except Exception as exc:
            raise InternalError(f"{self._what}: PyTorch execute failure: {error_summary(exc)}") from None

    def _tensor(self, name: str, array: np.ndarray) -> Any:
        if name in self.plan.strings:
            return [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.reshape(-1)]
        return to_tensor(array, self.device)

    def _array(self, name: str, value: Any, rows: int) -> np.ndarray:
        expected = self._expected[name]
        if isinstance(value, list):
            if expected != "BYTES":
                raise InvalidArgument(
                    f"{self._what}: output '{name}' is a List[str], but the config declares {expected}"
                )
            out = np.empty(len(value), dtype=np.object_)
            out[:] = [s.encode("utf-8") for s in value]
            return out
        got = _TORCH_TO_WIRE.get(value.dtype, str(value.dtype))
        if got != expected:
            raise InvalidArgument(
                f"{self._what}: configuration expects datatype TYPE_{expected} for output '{name}', "
                f"model provides TYPE_{got}"
            )
        if value.dim() == 0:
            raise InvalidArgument(f"{self._what}: output '{name}' is a scalar which is not supported")
        if rows >= 0 and value.shape[0] != rows:
            raise InternalError(
                f"{self._what}: output '{name}' has {value.shape[0]} rows for a batch of {rows}; a model with "
                f"max_batch_size > 0 must return the batch dimension first"
            )
        return to_numpy(value)


def to_tensor(array: np.ndarray, device: torch.device | None) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (copied to ``device`` when that is not the CPU)."""
    if array.dtype.kind == "V":  # ml_dtypes.bfloat16 (BF16), which torch.from_numpy cannot take
        tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    else:
        if not array.flags.writeable and array.nbytes < _COPY_BELOW_BYTES:
            array = array.copy()
        tensor = torch.from_numpy(array)
    if device is not None and device.type != "cpu":
        tensor = tensor.to(device)
    return tensor


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The output as numpy: a view of CPU tensors, a copy from other devices.

    ``forward`` runs under inference_mode / no_grad, so outputs never require grad (no detach).
    """
    if not tensor.is_cpu:
        tensor = tensor.cpu()
    if tensor.dtype is torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(numpy_dtype("BF16"))
    return tensor.numpy()


def _flatten(value: Any, path: Path_, out: list[tuple[Path_, Any]], what: str) -> list[tuple[Path_, Any]]:
    """The returned tensors (and List[str]) in order, each with its path of keys/indexes."""
    if isinstance(value, torch.Tensor):
        out.append((path, value))
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            out.append((path, list(value)))
        else:
            for i, item in enumerate(value):
                _flatten(item, (*path, i), out, what)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(item, (*path, str(key)), out, what)
    else:
        raise InvalidArgument(
            f"{what}: forward returned a {type(value).__name__}; outputs must be Tensors or List[str], "
            f"alone or in a tuple, list or dict"
        )
    return out


def _rows(inputs: Mapping[str, np.ndarray]) -> int:
    for array in inputs.values():
        return int(array.shape[0]) if array.ndim else 1
    return -1


def _type_name(tensor: Any) -> str:
    return str(tensor.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_number[tensor.data_type].name)


def _execution_setters(
    options: TorchOptions, torchscript: bool, device: torch.device | None
) -> list[Callable[[], Any]]:
    """Settings Triton applies before each execution (JIT ones matter for TorchScript only)."""
    setters: list[Callable[[], Any]] = []
    if torchscript:
        optimize = options.optimized_execution  # thread-local in PyTorch: set on the instance's thread
        setters.append(lambda: torch._C._set_graph_executor_optimize(optimize))
        for value, func in (
            (options.jit_executor, torch._C._jit_set_profiling_executor),
            (options.jit_profiling, torch._C._jit_set_profiling_mode),
            (options.tensor_fuser, torch._C._jit_set_texpr_fuser_enabled),
        ):
            if value is not None:  # process-wide: only touched when the model sets it, as in Triton
                setters.append(functools.partial(func, value))
    if device is not None and device.type == "cuda":
        cudnn = options.cudnn
        setters.append(lambda: setattr(torch.backends.cudnn, "enabled", cudnn))
    return setters
