"""Checks Triton makes on a normalized model configuration, with messages naming the field."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from inferd.config.model_config_pb2 import (
    BatchInput,
    DataType,
    ModelConfig,
    ModelInput,
    ModelInstanceGroup,
    ModelQueuePolicy,
    ModelSequenceBatching,
)
from inferd.config.platforms import (
    ENSEMBLE_PLATFORM,
    KNOWN_PLATFORM_BACKENDS,
    backend_of_platform,
)
from inferd.errors import ConfigError

_TENSORRT_PLATFORM = "tensorrt_plan"
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_Control = ModelSequenceBatching.Control

#: Raises ConfigError with the model name in front of the message.
Fail = Callable[[str], NoReturn]


def validate(config: ModelConfig) -> None:
    """Raise ConfigError for the first inconsistency in a normalized ``config``."""
    if not config.name:
        raise ConfigError("model configuration must specify 'name'")
    fail = _failer(config.name)
    _validate_platform(config, fail)
    if config.max_batch_size < 0:
        fail(f"'max_batch_size' must be >= 0, got {config.max_batch_size}")
    _validate_version_policy(config, fail)
    for kind, tensors in (("input", config.input), ("output", config.output)):
        _validate_tensors(config, kind, tensors, fail)
    _validate_batch_io(config, fail)
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config, fail)
    if config.HasField("sequence_batching"):
        _validate_sequence_batching(config, fail)
    if config.HasField("ensemble_scheduling"):
        _validate_ensemble(config, fail)
    else:
        _validate_instance_groups(config, fail)
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        fail("the response cache does not support decoupled models; disable 'response_cache'")


def _failer(model: str) -> Fail:
    def fail(message: str) -> NoReturn:
        raise ConfigError(f"model '{model}': {message}")

    return fail


def _validate_platform(config: ModelConfig, fail: Fail) -> None:
    if config.platform == ENSEMBLE_PLATFORM:
        if config.backend:
            fail(f"an ensemble must have an empty 'backend', got '{config.backend}'")
        if not config.HasField("ensemble_scheduling"):
            fail("platform 'ensemble' requires 'ensemble_scheduling'")
        return
    if config.HasField("ensemble_scheduling"):
        fail(f"'ensemble_scheduling' needs platform 'ensemble', got '{config.platform}'")
    if not config.backend:
        if config.platform:
            fail(f"unknown platform '{config.platform}' and no 'backend'")
        fail("must specify 'platform' or 'backend'")
    if config.backend in KNOWN_PLATFORM_BACKENDS:
        if backend_of_platform(config.platform) != config.backend:
            fail(f"'platform' '{config.platform}' does not match 'backend' '{config.backend}'")


def _validate_version_policy(config: ModelConfig, fail: Fail) -> None:
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice is None:
        fail("must specify 'version_policy'")
    if choice == "latest" and policy.latest.num_versions < 1:
        fail("'version_policy.latest.num_versions' must be >= 1")
    if choice == "specific":
        if not policy.specific.versions:
            fail("'version_policy.specific' must list at least one version")
        bad = [v for v in policy.specific.versions if v < 1]
        if bad:
            fail(f"'version_policy.specific.versions' must be >= 1, got {bad}")


def _validate_tensors(config: ModelConfig, kind: str, tensors: Iterable[Any], fail: Fail) -> None:
    seen: set[str] = set()
    for tensor in tensors:
        if not tensor.name:
            fail(f"an {kind} must specify 'name'")
        what = f"{kind} '{tensor.name}'"
        if tensor.name in seen:
            fail(f"{what} is declared more than once")
        seen.add(tensor.name)
        if tensor.data_type == DataType.Value("TYPE_INVALID"):
            fail(f"{what} must specify 'data_type'")
        if not tensor.dims:
            fail(f"{what} must specify 'dims'")
        if any(d < 1 and d != -1 for d in tensor.dims):
            fail(f"{what}: 'dims' {list(tensor.dims)} must be integers >= 1, or -1 for a variable-size dimension")
        if tensor.HasField("reshape"):
            _validate_reshape(config, what, list(tensor.dims), list(tensor.reshape.shape), fail)
        if tensor.is_shape_tensor and config.platform != _TENSORRT_PLATFORM:
            fail(f"{what}: shape tensors are only supported for TensorRT")
        if (
            kind == "input"
            and tensor.format
            in (
                ModelInput.Format.Value("FORMAT_NHWC"),
                ModelInput.Format.Value("FORMAT_NCHW"),
            )
            and len(tensor.dims) != 3
        ):
            fail(f"{what}: format NHWC/NCHW requires 3 dims, got {list(tensor.dims)}")


def _validate_reshape(config: ModelConfig, what: str, dims: list[int], shape: list[int], fail: Fail) -> None:
    if not shape and config.max_batch_size == 0:
        fail(f"{what}: a non-batching model cannot have an empty 'reshape' (no scalar tensors)")
    if any(d < 1 and d != -1 for d in shape):
        fail(f"{what}: 'reshape' {shape} must be integers >= 1, or -1")

    def chunks(values: list[int]) -> list[int]:  # element counts between -1 dims
        out, count = [], 1
        for v in values:
            if v == -1:
                out.append(count)
                count = 1
            else:
                count *= v
        return [*out, count]

    if -1 not in dims and -1 not in shape:
        if math.prod(dims) != math.prod(shape):
            fail(f"{what}: 'dims' {dims} and 'reshape' {shape} have different element counts")
    elif chunks(dims) != chunks(shape):
        fail(f"{what}: 'dims' {dims} and 'reshape' {shape} are not compatible")


def _validate_batch_io(config: ModelConfig, fail: Fail) -> None:
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    for batch_input in config.batch_input:
        kind = BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            fail(f"batch input kind '{kind}' expects 1 source input, got {len(batch_input.source_input)}")
        if DataType.Name(batch_input.data_type) not in ("TYPE_INT32", "TYPE_FP32"):
            fail(f"batch input {list(batch_input.target_name)}: data_type must be TYPE_INT32 or TYPE_FP32")
        for source in batch_input.source_input:
            if source not in inputs:
                fail(f"batch input: unknown source input '{source}'")
    for batch_output in config.batch_output:
        if len(batch_output.source_input) != 1:
            fail(f"batch output expects 1 source input, got {len(batch_output.source_input)}")
        for source in batch_output.source_input:
            if source not in inputs:
                fail(f"batch output: unknown source input '{source}'")
        for target in batch_output.target_name:
            if target not in outputs:
                fail(f"batch output: unknown target output '{target}'")


def _validate_dynamic_batching(config: ModelConfig, fail: Fail) -> None:
    batching = config.dynamic_batching
    for size in batching.preferred_batch_size:
        if size <= 0 or size > config.max_batch_size:
            fail(f"dynamic_batching.preferred_batch_size {size} must be in [1, max_batch_size={config.max_batch_size}]")
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            fail(f"dynamic_batching.default_priority_level must be in [1, {levels}]")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                fail(f"dynamic_batching.priority_queue_policy level {level} must be in [1, {levels}]")
    if batching.preserve_ordering:
        if levels > 1:
            fail("dynamic_batching.preserve_ordering allows only one priority level")
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        delay = ModelQueuePolicy.TimeoutAction.Value("DELAY")
        if any(p.default_timeout_microseconds and p.timeout_action == delay for p in policies):
            fail("a queue policy cannot use timeout_action DELAY with preserve_ordering")


def _validate_sequence_batching(config: ModelConfig, fail: Fail) -> None:
    sequence = config.sequence_batching
    if config.response_cache.enable:
        fail("the response cache does not support sequence batching; disable 'response_cache'")
    kinds_seen: dict[int, str] = {}
    for control_input in sequence.control_input:
        if not control_input.name:
            fail("a sequence_batching.control_input must have a 'name'")
        for control in control_input.control:
            kind = _Control.Kind.Name(control.kind)
            if control.kind in kinds_seen:
                fail(f"sequence_batching specifies more than one {kind} control tensor")
            kinds_seen[control.kind] = control_input.name
            _validate_control(control_input.name, kind, control, fail)
    if sequence.HasField("oldest"):
        for size in sequence.oldest.preferred_batch_size:
            if size <= 0 or size > config.max_batch_size:
                fail(
                    f"sequence_batching.oldest.preferred_batch_size {size} must be in"
                    f" [1, max_batch_size={config.max_batch_size}]"
                )
    if sequence.HasField("direct"):
        utilization = sequence.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            fail("sequence_batching.direct.minimum_slot_utilization must be in (0.0, 1.0]")


def _validate_control(name: str, kind: str, control: _Control, fail: Fail) -> None:
    what = f"sequence_batching control '{name}' ({kind})"
    if kind == "CONTROL_SEQUENCE_CORRID":
        if DataType.Name(control.data_type) not in _CORRID_TYPES:
            fail(f"{what}: data_type must be one of {', '.join(_CORRID_TYPES)}")
        return
    if kind not in ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY"):
        return
    given = [f for f in ("int32_false_true", "fp32_false_true", "bool_false_true") if len(getattr(control, f))]
    if len(given) != 1:
        fail(f"{what} must specify exactly one of 'int32_false_true', 'fp32_false_true', 'bool_false_true'")
    if len(getattr(control, given[0])) != 2:
        fail(f"{what}: '{given[0]}' must have exactly 2 entries")


def _validate_instance_groups(config: ModelConfig, fail: Fail) -> None:
    kinds = ModelInstanceGroup.Kind
    if not config.instance_group:
        fail("must specify one or more 'instance_group's")
    for group in config.instance_group:
        what = f"instance group '{group.name}'"
        kind = kinds.Name(group.kind)
        if group.count < 1:
            fail(f"{what}: 'count' must be >= 1, got {group.count}")
        if kind == "KIND_AUTO":
            fail(f"{what}: kind KIND_AUTO was not resolved (normalize the config first)")
        if kind in ("KIND_CPU", "KIND_MODEL") and group.gpus:
            fail(f"{what} has kind {kind} but specifies GPUs {list(group.gpus)}")
        if kind == "KIND_GPU" and not group.gpus:
            fail(f"{what} has kind KIND_GPU but no GPUs are available")
        if group.profile and config.platform != _TENSORRT_PLATFORM:
            fail(f"{what}: 'profile' is only supported for TensorRT models")


def _validate_ensemble(config: ModelConfig, fail: Fail) -> None:
    if config.instance_group:
        fail("an ensemble must not specify 'instance_group'")
    if config.HasField("optimization"):
        fail("an ensemble must not specify 'optimization'")
    if config.model_warmup:
        fail("an ensemble must not specify 'model_warmup'")
    steps = config.ensemble_scheduling.step
    if not steps:
        fail("an ensemble must specify at least one 'step'")
    produced = {t.name for t in config.input}
    written: set[str] = set()
    for index, step in enumerate(steps):
        if not step.model_name:
            fail(f"ensemble step {index} must specify 'model_name'")
        if not step.input_map:
            fail(f"ensemble step {index} ('{step.model_name}') must specify 'input_map'")
        if not step.output_map:
            fail(f"ensemble step {index} ('{step.model_name}') must specify 'output_map'")
        for tensor in step.output_map.values():
            if tensor in written:
                fail(f"ensemble tensor '{tensor}' is written by more than one step")
            written.add(tensor)
    produced |= written
    for step in steps:
        for tensor in step.input_map.values():
            if tensor not in produced:
                fail(
                    f"ensemble tensor '{tensor}' read by step '{step.model_name}' is neither"
                    " an ensemble input nor produced by a step"
                )
    for output in config.output:
        if output.name not in written:
            fail(f"ensemble output '{output.name}' is not produced by any step")
