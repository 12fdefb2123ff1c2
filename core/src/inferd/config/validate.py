"""Checks Triton makes on a normalized model configuration, in Triton's order and with its sentences.

Triton's sentence comes first and exactly (its QA, ``qa/L0_model_config``, greps for it); an
inferd hint may follow after ``; ``. Triton names the model in each sentence (``... for <model>``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from inferd.config.model_config_pb2 import (
    BatchInput,
    BatchOutput,
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
from inferd.contracts.errors import ConfigError

_TENSORRT_PLATFORM = "tensorrt_plan"
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
#: Triton's default ``--min-supported-compute-capability`` (printed in its invalid-GPU sentence).
_MIN_COMPUTE_CAPABILITY = 6.0
_Control = ModelSequenceBatching.Control

log = logging.getLogger(__name__)

#: Raises ConfigError with the model name in front of the message.
Fail = Callable[[str], NoReturn]


def validate(config: ModelConfig, available_gpus: Sequence[int] | None = None) -> None:
    """Raise ConfigError for the first inconsistency in a normalized ``config``, in the order of
    Triton's ``ValidateModelConfig``, ``ValidateModelIOConfig`` and ``ValidateInstanceGroup``.

    ``available_gpus``: the GPU ids a KIND_GPU group may name (``None``: not checked)."""
    name = config.name
    if not name:
        raise ConfigError("model configuration must specify 'name'")
    _validate_platform(config, _fail)
    if config.max_batch_size < 0:
        _fail(f"'max_batch_size' must be non-negative value for {name}; got {config.max_batch_size}")
    _validate_version_policy(config, _fail)
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config, _fail)
    if config.HasField("sequence_batching"):
        _validate_sequence_batching(config, _fail)
    if config.HasField("ensemble_scheduling"):
        _validate_ensemble(config, _failer(name))
    elif config.platform == ENSEMBLE_PLATFORM:
        _fail(f"ensemble scheduling must be set for ensemble {name} whose platform is {ENSEMBLE_PLATFORM}")
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        _fail(
            f"Response Cache does not currently support model {name} with 'decoupled' transaction policy. "
            "Please disable the response cache."
        )
    if config.HasField("model_metrics"):
        _validate_model_metrics(config, _fail)

    def fail_for(message: str) -> NoReturn:  # ValidateModelIOConfig names the model at the end
        raise ConfigError(f"{message} for {name}")

    for kind, tensors in (("input", config.input), ("output", config.output)):
        _validate_tensors(config, kind, tensors, fail_for)
    _validate_batch_io(config, fail_for)
    if not config.HasField("ensemble_scheduling"):
        _validate_instance_groups(config, available_gpus, _fail)


#: The ``model_metrics`` families a model may set histogram buckets for (Triton core's).
CUSTOMIZABLE_METRICS = ("nv_inference_first_response_histogram_ms",)


def _validate_model_metrics(config: ModelConfig, fail: Fail) -> None:
    """Triton's ``ValidateModelMetrics`` (2.52+), its sentences first; a family Triton core does not
    customize is logged as a warning, as Triton does, and the model loads."""
    for index, control in enumerate(config.model_metrics.metric_control):
        where = f"; model '{config.name}', model_metrics.metric_control[{index}]"
        if not control.HasField("metric_identifier"):
            fail("metric control must specify 'metric_identifier'" + where)
        if not control.metric_identifier.family:
            fail("metric identifier must specify non-empty 'family'" + where)
        if not control.HasField("histogram_options"):
            fail("metric control must specify 'histogram_options'" + where)
        if not control.histogram_options.buckets:
            fail("histogram options must specify non-empty 'buckets'" + where)
        family = control.metric_identifier.family
        if family not in CUSTOMIZABLE_METRICS:
            log.warning(
                "Metric family '%s' in 'metric_identifier' is not a customizable metric in Triton core.%s; "
                "its histogram_options are ignored (customizable: %s)",
                family,
                where,
                ", ".join(CUSTOMIZABLE_METRICS),
            )


def _fail(message: str) -> NoReturn:
    raise ConfigError(message)


def _failer(model: str) -> Fail:
    def fail(message: str) -> NoReturn:
        raise ConfigError(f"model '{model}': {message}")

    return fail


def _validate_platform(config: ModelConfig, fail: Fail) -> None:
    name = config.name
    if config.platform == ENSEMBLE_PLATFORM:
        if config.backend:
            fail(
                f"Ensemble model '{name}' must have platform type '{config.platform}' and empty backend type; "
                f"got backend '{config.backend}'"
            )
        return
    if config.HasField("ensemble_scheduling"):
        fail(f"ensemble scheduling cannot be set for model '{name}' whose platform is not {ENSEMBLE_PLATFORM}")
    if not config.backend:
        fail(f"unexpected platform type '{config.platform}' for {name}; set 'backend' (or a known 'platform')")
    if config.backend in KNOWN_PLATFORM_BACKENDS and backend_of_platform(config.platform) != config.backend:
        fail(f"unexpected 'platform' and 'backend' pair, got:{config.platform}, {config.backend}")


def _validate_version_policy(config: ModelConfig, fail: Fail) -> None:
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice is None:
        fail(f"must specify 'version policy' for {config.name}")
    if choice == "latest" and policy.latest.num_versions < 1:
        fail("'version_policy.latest.num_versions' must be >= 1")
    if choice == "specific":
        if not policy.specific.versions:
            fail("'version_policy.specific' must list at least one version")
        bad = [v for v in policy.specific.versions if v < 1]
        if bad:
            fail(f"'version_policy.specific.versions' must be >= 1, got {bad}")


def _validate_tensors(config: ModelConfig, kind: str, tensors: Iterable[Any], fail: Fail) -> None:
    """Triton's ``ValidateIOShape`` and ``ValidateModelInput``/``Output`` (``fail`` adds " for <model>")."""
    seen: set[str] = set()
    prefix = f"model {kind} "
    for tensor in tensors:
        if not tensor.name:
            fail(f"{prefix}must specify 'name'")
        what = f"{prefix}'{tensor.name}'"
        if tensor.data_type == DataType.Value("TYPE_INVALID"):
            fail(f"{what} must specify 'data_type'")
        if not tensor.dims:
            fail(f"{what} must specify 'dims'")
        if tensor.HasField("reshape") and not tensor.reshape.shape and config.max_batch_size == 0:
            fail(f"{what} cannot have empty reshape for non-batching model as scalar tensors are not supported")
        if any(d < 1 and d != -1 for d in tensor.dims):
            fail(f"{what} dimension must be integer >= 1, or -1 to indicate a variable-size dimension")
        if tensor.HasField("reshape"):
            _validate_reshape(what, list(tensor.dims), list(tensor.reshape.shape), fail)
        if (
            kind == "input"
            and tensor.format in (ModelInput.Format.Value("FORMAT_NHWC"), ModelInput.Format.Value("FORMAT_NCHW"))
            and len(tensor.dims) != 3
        ):
            fail("model input NHWC/NCHW require 3 dims")
        if tensor.is_shape_tensor and config.platform != _TENSORRT_PLATFORM:
            fail("shape tensors are only supported for TensorRT platform")
        if tensor.name in seen:  # Triton finds this later (its backends); inferd at validation
            fail(f"{what} is declared more than once")
        seen.add(tensor.name)


def _validate_reshape(what: str, dims: list[int], shape: list[int], fail: Fail) -> None:
    """Triton's reshape checks: zeros, element counts, and the chunks between variable dims."""
    if any(d < 1 and d != -1 for d in shape):
        fail(f"{what} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension")

    def chunks(values: list[int]) -> list[int]:  # element counts between -1 dims
        out, count = [], 1
        for v in values:
            if v == -1:
                out.append(count)
                count = 1
            else:
                count *= v
        return [*out, count]

    def size(values: list[int]) -> int:  # Triton's GetElementCount: -1 when any dim is variable
        return -1 if -1 in values else math.prod(values) if values else 0

    dims_size, reshape_size = size(dims), size(shape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        fail(f"{what} has different size for dims and reshape")
    if dims_size == -1:
        dim_chunks, reshape_chunks = chunks(dims), chunks(shape)
        if len(dim_chunks) != len(reshape_chunks):
            fail(f"{what} has different number of variable-size dimensions for dims and reshape")
        if dim_chunks != reshape_chunks:
            fail(f"{what} has different size for dims and reshape")


def _validate_batch_io(config: ModelConfig, fail: Fail) -> None:
    inputs = {t.name for t in config.input}
    outputs = {t.name for t in config.output}
    for batch_input in config.batch_input:
        kind = BatchInput.Kind.Name(batch_input.kind)
        if len(batch_input.source_input) != 1:
            fail(f"batch input kind '{kind}' expects 1 source input, got {len(batch_input.source_input)}")
        if DataType.Name(batch_input.data_type) not in ("TYPE_INT32", "TYPE_FP32"):
            fail("batch input data type must be TYPE_INT32 or TYPE_FP32")
        for source in batch_input.source_input:
            if source not in inputs:
                fail(f"unknown source input name '{source}'")
    for batch_output in config.batch_output:
        kind = BatchOutput.Kind.Name(batch_output.kind)
        if len(batch_output.source_input) != 1:
            fail(f"batch output kind '{kind}' expects 1 source input, got {len(batch_output.source_input)}")
        for source in batch_output.source_input:
            if source not in inputs:
                fail(f"unknown source input name '{source}'")
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                fail(f"unknown target output name '{target}'")
            if target in targets:
                fail(f"target output name '{target}' can only be specified once")
            targets.add(target)


def _validate_dynamic_batching(config: ModelConfig, fail: Fail) -> None:
    batching, name = config.dynamic_batching, config.name
    for size in batching.preferred_batch_size:
        if size <= 0:
            fail(f"dynamic batching preferred size must be positive for {name}; got {size}")
        if size > config.max_batch_size:
            fail(
                f"dynamic batching preferred size must be <= max batch size for {name}; "
                f"got {size} > max_batch_size {config.max_batch_size}"
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            fail(f"default priority level must be in range [1, {levels}] for {name}")
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                fail(f"priority queue policy must have priority level in range [1, {levels}] for {name}; got {level}")
    if batching.preserve_ordering:
        if levels > 1:
            fail(f"Only one priority level is allowed when 'preserve_ordering' is true for {name}")
        policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
        delay = ModelQueuePolicy.TimeoutAction.Value("DELAY")
        if any(p.default_timeout_microseconds and p.timeout_action == delay for p in policies):
            fail(f"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {name}")


def _validate_sequence_batching(config: ModelConfig, fail: Fail) -> None:
    sequence, name = config.sequence_batching, config.name
    if config.response_cache.enable:
        fail(
            f"Response Cache does not currently support model {name} with sequence batching scheduler. "
            "Please disable the response cache."
        )
    for kind in ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_CORRID"):
        _validate_control_kind(sequence, name, kind, fail)
    if sequence.HasField("oldest"):
        for size in sequence.oldest.preferred_batch_size:
            if size <= 0:
                fail(f"sequence batching preferred batch size must be positive for {name}; got {size}")
            if size > config.max_batch_size:
                fail(
                    f"sequence batching preferred batch size must be <= max batch size for {name}; "
                    f"got {size} > max_batch_size {config.max_batch_size}"
                )
    if sequence.HasField("direct") and not 0.0 <= sequence.direct.minimum_slot_utilization <= 1.0:
        fail(f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}")


_BOOL_VALUES = ("int32_false_true", "fp32_false_true", "bool_false_true")


def _validate_control_kind(sequence: ModelSequenceBatching, name: str, kind: str, fail: Fail) -> None:
    """Triton's ``Get{Boolean,Typed}SequenceControlProperties`` for one control kind."""
    wanted = _Control.Kind.Value(kind)
    seen_tensors: set[str] = set()
    seen = False
    for control_input in sequence.control_input:
        if not control_input.name:
            fail(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in seen_tensors:
            fail(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple control kinds "
                f"for {name}"
            )
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            if control.kind != wanted:
                continue
            if seen:
                fail(f"sequence batching specifies multiple {kind} tensors for {name}")
            seen = True
            given = [f for f in _BOOL_VALUES if len(getattr(control, f))]
            if kind == "CONTROL_SEQUENCE_CORRID":
                if given:
                    fail(
                        "sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
                        f"'bool_false_true' for {kind} for {name}"
                    )
                if DataType.Name(control.data_type) not in _CORRID_TYPES:
                    fail(
                        f"unexpected data type for control {kind} for {name}. Allowed data types are TYPE_UINT64, "
                        "TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                    )
                continue
            if not given:
                fail(
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
                    f"'bool_false_true' for {kind} for {name}"
                )
            if len(given) > 1:
                fail(
                    "sequence batching specifies more than one from 'int32_false_true', 'fp32_false_true' and "
                    f"'bool_false_true' for {kind} for {name}"
                )
            if len(getattr(control, given[0])) != 2:
                fail(f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind} for {name}")


def _validate_instance_groups(config: ModelConfig, available_gpus: Sequence[int] | None, fail: Fail) -> None:
    """Triton's ``ValidateInstanceGroup`` (after normalization: no KIND_AUTO is left)."""
    kinds = ModelInstanceGroup.Kind
    name = config.name
    if not config.instance_group:
        fail(f"must specify one or more 'instance group's for {name}")
    gpus = set(available_gpus or ())
    for group in config.instance_group:
        what = f"instance group {group.name} of model {name}"
        kind = kinds.Name(group.kind)
        if kind == "KIND_MODEL" and group.gpus:
            fail(f"{what} has kind KIND_MODEL but specifies one or more GPUs")
        elif kind == "KIND_GPU":
            if not group.gpus:
                fail(f"{what} has kind KIND_GPU but no GPUs are available")
            for gpu in group.gpus:
                if available_gpus is not None and gpu not in gpus:
                    fail(
                        f"{what} specifies invalid or unsupported gpu id {gpu}. GPUs with at least the minimum "
                        f"required CUDA compute compatibility of {_MIN_COMPUTE_CAPABILITY:.6f} are: "
                        + ", ".join(str(g) for g in sorted(gpus))
                    )
        elif kind == "KIND_CPU" and group.gpus:
            fail(f"{what} has kind KIND_CPU but specifies one or more GPUs")
        elif kind == "KIND_AUTO":
            fail(f"{what} has unexpected kind KIND_AUTO")
        if group.count < 1:
            fail(f"{what}: 'count' must be >= 1, got {group.count}")
        if group.profile and config.platform != _TENSORRT_PLATFORM:
            fail(
                f"{what} and platform {config.platform}specifies profile field which is only supported for "
                "TensorRT models"
            )


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
