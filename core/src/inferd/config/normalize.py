"""Filling the defaults Triton fills after auto-complete, and choosing versions to serve."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.config.model_config_pb2 import ModelConfig, ModelInstanceGroup
from inferd.config.platforms import ENSEMBLE_PLATFORM, backend_of_platform, platform_for
from inferd.contracts.errors import ConfigError

#: Triton's default ``sequence_batching.max_sequence_idle_microseconds`` (1 s).
SEQUENCE_IDLE_DEFAULT_MICROSECONDS = 1_000_000


def normalize(
    config: ModelConfig,
    model_name: str,
    default_model_filename: str,
    default_cpu_instance_count: int = 1,
    available_gpus: Sequence[int] = (),
) -> None:
    """Fill in place what Triton fills after auto-complete (its ``NormalizeModelConfig`` and
    ``NormalizeInstanceGroup``).

    ``model_name`` is the model's directory name: an empty ``name`` takes it, a different one is
    an error. ``default_model_filename`` is the backend's default model file
    (``model.onnx``...). ``default_cpu_instance_count`` is the count of a KIND_CPU group that gives
    none (Triton uses 2 for onnxruntime and tensorflow, 1 otherwise). ``available_gpus`` are the
    GPU ids a KIND_AUTO group may use; with none, KIND_AUTO becomes KIND_CPU.
    """
    if not config.name:
        config.name = model_name
    elif config.name != model_name:
        raise ConfigError(
            f"model '{model_name}': config.pbtxt names the model '{config.name}', which does not"
            " match its directory; the name must equal the directory name"
        )
    _fill_platform_backend(config, default_model_filename)
    is_ensemble = config.HasField("ensemble_scheduling") or config.platform == ENSEMBLE_PLATFORM

    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1

    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        if not batching.preferred_batch_size and config.max_batch_size > 0:
            batching.preferred_batch_size.append(config.max_batch_size)

    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_MICROSECONDS
        oldest = sequence.HasField("oldest") and not sequence.oldest.preferred_batch_size
        if oldest and config.max_batch_size > 0:
            sequence.oldest.preferred_batch_size.append(config.max_batch_size)

    if is_ensemble:
        # Triton derives 'decoupled' from the steps when it builds the ensemble; until then false.
        if not config.HasField("model_transaction_policy"):
            config.model_transaction_policy.decoupled = False
        return

    optimization = config.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    _normalize_instance_groups(config, default_cpu_instance_count, available_gpus)


def _fill_platform_backend(config: ModelConfig, default_model_filename: str) -> None:
    """Fill ``backend`` from ``platform`` and ``platform`` from ``backend`` as Triton does."""
    if config.platform == ENSEMBLE_PLATFORM:
        return
    if not config.backend and config.platform:
        config.backend = backend_of_platform(config.platform) or ""
    if config.backend and not config.platform:
        filename = config.default_model_filename or default_model_filename
        config.platform = platform_for(config.backend, filename)
    if not config.default_model_filename and default_model_filename:
        config.default_model_filename = default_model_filename


def _normalize_instance_groups(config: ModelConfig, default_cpu_count: int, available_gpus: Sequence[int]) -> None:
    kinds = ModelInstanceGroup.Kind
    if not config.instance_group:
        # Triton names the implicit group after the model (explicit ones get "<model>_<i>").
        config.instance_group.add(name=config.name)
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == kinds.Value("KIND_AUTO"):
            usable = bool(available_gpus) and all(g in available_gpus for g in group.gpus)
            group.kind = kinds.Value("KIND_GPU") if usable else kinds.Value("KIND_CPU")
        if group.count < 1:
            cpu = group.kind == kinds.Value("KIND_CPU")
            group.count = default_cpu_count if cpu else 1
        if group.kind == kinds.Value("KIND_GPU") and not group.gpus:
            group.gpus.extend(available_gpus)


def version_policy_select(config: ModelConfig, available: list[int]) -> list[int]:
    """The versions to serve, ascending, from the numeric version directories ``available``.

    ``latest {num_versions: N}`` keeps the N highest (1 when no policy is set), ``all`` keeps
    every one, ``specific`` keeps the listed versions that exist. May be empty; Triton then
    refuses to load the model.
    """
    found = sorted(set(available))
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return found
    if choice == "specific":
        wanted = set(policy.specific.versions)
        return [v for v in found if v in wanted]
    count = policy.latest.num_versions if choice == "latest" else 1
    return found[len(found) - count :] if count > 0 else []
