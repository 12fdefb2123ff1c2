"""Completing and checking a model configuration against an engine, following Triton's rules.

* ``max_batch_size`` comes from a dynamic first dimension and the largest batch the selected
  optimization profiles accept; dims given in the config hint whether the model batches.
* Inputs and outputs come from the engine's I/O tensors (names, datatypes, dims); a tensor
  without dims gets ``dims: [1]`` with ``reshape: { shape: [] }``.
* A batching model without a scheduler gets ``dynamic_batching {}``.
* Instance groups become KIND_GPU on every visible GPU where they name none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import ConfigError, InvalidArgument, Unsupported
from inferd_backend_tensorrt.dtypes import config_type
from inferd_backend_tensorrt.engine import EngineInfo, EngineTensor, profile_indices

if TYPE_CHECKING:
    from inferd.api import ModelConfig

KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL = 0, 1, 2, 3


def complete_instance_groups(config: ModelConfig, gpus: list[int]) -> None:
    """KIND_AUTO becomes KIND_GPU; a GPU group naming no GPU gets every visible one."""
    if not config.instance_group:
        config.instance_group.add(kind=KIND_GPU)
    for group in config.instance_group:
        if group.kind == KIND_AUTO:
            group.kind = KIND_GPU
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)


def _config_rank(tensor: object) -> int | None:
    if tensor.HasField("reshape"):  # type: ignore[attr-defined]
        return len(tensor.reshape.shape)  # type: ignore[attr-defined]
    dims = list(tensor.dims)  # type: ignore[attr-defined]
    return len(dims) if dims else None


def _batch_hint(config: ModelConfig, info: EngineInfo) -> bool | None:
    """True/False when the config's dims say the model does / does not batch; None when silent."""
    hint: bool | None = None
    for tensor in [*config.input, *config.output]:
        engine_tensor = info.get(tensor.name)
        rank = _config_rank(tensor)
        if engine_tensor is None or rank is None or engine_tensor.is_shape_tensor:
            continue
        says = len(engine_tensor.shape) == rank + 1
        if hint is not None and says != hint:
            raise ConfigError(
                f"model '{config.name}': the dims of the config's tensors disagree on whether the model batches "
                f"(tensor '{tensor.name}': engine shape {list(engine_tensor.shape)}, config rank {rank})"
            )
        hint = says
    return hint


def _dims(tensor: EngineTensor, batching: bool) -> tuple[list[int], bool]:
    """Config dims for an engine tensor, and whether it needs ``reshape: { shape: [] }``."""
    dims = list(tensor.shape[1:] if batching else tensor.shape)
    return (dims, False) if dims else ([1], True)


def _fill_tensors(config: ModelConfig, tensors: list[EngineTensor], is_input: bool, batching: bool) -> None:
    field = config.input if is_input else config.output
    present = {t.name: t for t in field}
    for info in tensors:
        if info.is_shape_tensor or info.datatype is None:
            continue
        tensor = present.get(info.name)
        if tensor is None:
            if present:  # the config lists some tensors: leave the others out (outputs may be a subset)
                continue
            tensor = field.add(name=info.name)
        if tensor.data_type == 0:
            tensor.data_type = (
                tensor.DESCRIPTOR.fields_by_name["data_type"]
                .enum_type.values_by_name[config_type(info.datatype)]
                .number
            )
        if not tensor.dims:
            dims, reshape = _dims(info, batching)
            tensor.dims.extend(dims)
            if reshape and not tensor.HasField("reshape"):
                tensor.reshape.SetInParent()


def autocomplete(config: ModelConfig, info: EngineInfo, gpus: list[int]) -> None:
    """Fill ``config`` in place from the engine (Triton's TensorRT auto-complete)."""
    complete_instance_groups(config, gpus)
    profiles = profile_indices(config.instance_group, info.num_profiles, config.name)
    engine_max = info.max_batch_size(profiles)
    hint = _batch_hint(config, info)
    if hint is True and engine_max == 0:
        raise ConfigError(
            f"autofill failed for model '{config.name}': the config's dims give tensors a batch dimension, but "
            f"the engine does not batch (its first dimensions are not dynamic)"
        )
    if hint is False:
        engine_max = 0
    if config.max_batch_size == 0:
        config.max_batch_size = engine_max
    elif config.max_batch_size > engine_max:
        raise ConfigError(
            f"autofill failed for model '{config.name}': the config sets max_batch_size {config.max_batch_size}, "
            f"but the engine's optimization profiles {profiles} accept batches of at most {engine_max}"
        )
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()
    batching = config.max_batch_size > 0
    _fill_tensors(config, info.inputs, True, batching)
    _fill_tensors(config, info.outputs, False, batching)


def check_config(config: ModelConfig, info: EngineInfo) -> list[int]:
    """Check a (completed) config against the engine; return the profiles the groups may use."""
    model = config.name
    for group in config.instance_group:
        if group.kind != KIND_GPU:
            kind = {KIND_CPU: "KIND_CPU", KIND_MODEL: "KIND_MODEL"}.get(group.kind, str(group.kind))
            raise InvalidArgument(
                f"model '{model}': instance group '{group.name}' has kind {kind}; TensorRT engines run only on "
                f"GPUs (use kind: KIND_GPU)"
            )
    for t in info.tensors:
        if t.is_shape_tensor:
            raise Unsupported(
                f"model '{model}': engine input '{t.name}' is a shape tensor, which inferd does not support"
            )
        if t.datatype is None:
            raise Unsupported(
                f"model '{model}': engine tensor '{t.name}' has TensorRT datatype {t.trt_dtype}, which the "
                f"inference protocol cannot carry"
            )
    batching = config.max_batch_size > 0
    profiles = profile_indices(config.instance_group, info.num_profiles, model)
    if batching:
        if not info.can_batch():
            raise InvalidArgument(
                f"model '{model}': max_batch_size is {config.max_batch_size}, but the engine has no dynamic first "
                f"dimension to batch along (set max_batch_size: 0)"
            )
        limit = info.max_batch_size(profiles)
        if limit < config.max_batch_size:
            raise InvalidArgument(
                f"model '{model}': max_batch_size is {config.max_batch_size}, but the optimization profiles "
                f"{profiles} accept batches of at most {limit}"
            )
    _check_tensors(config, info, batching)
    return profiles


def _check_tensors(config: ModelConfig, info: EngineInfo, batching: bool) -> None:
    model = config.name
    enum = config.DESCRIPTOR.fields_by_name["input"].message_type.fields_by_name["data_type"].enum_type
    for is_input, field in ((True, config.input), (False, config.output)):
        side = "input" if is_input else "output"
        available = [t.name for t in (info.inputs if is_input else info.outputs)]
        for tensor in field:
            engine_tensor = info.get(tensor.name)
            if engine_tensor is None or engine_tensor.is_input != is_input:
                raise InvalidArgument(
                    f"model '{model}': config {side} '{tensor.name}' is not an {side} of the engine; "
                    f"engine {side}s: {', '.join(available) or 'none'}"
                )
            declared = enum.values_by_number[tensor.data_type].name
            if declared != config_type(engine_tensor.datatype or "?"):
                raise InvalidArgument(
                    f"model '{model}': {side} '{tensor.name}' is {declared} in the config, but the engine's "
                    f"tensor is {engine_tensor.trt_dtype} ({config_type(engine_tensor.datatype or '?')})"
                )
            _check_rank(model, tensor, engine_tensor, batching)
    missing = [t.name for t in info.inputs if t.name not in {i.name for i in config.input}]
    if missing:
        raise InvalidArgument(
            f"model '{model}': the engine needs input(s) {missing}, which the config does not declare"
        )


def _check_rank(model: str, tensor: object, engine_tensor: EngineTensor, batching: bool) -> None:
    dims = list(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)  # type: ignore[attr-defined]
    full = ([-1] if batching else []) + dims
    shape = list(engine_tensor.shape)
    ok = len(full) == len(shape) and all(c == -1 or e == -1 or c == e for c, e in zip(full, shape, strict=True))
    if not ok:
        raise InvalidArgument(
            f"model '{model}', tensor '{engine_tensor.name}': the engine expects shape {shape}, but the config "
            f"gives {full}" + (" (a leading batch dimension because max_batch_size > 0, then dims)" if batching else "")
        )
