"""What a TensorRT model's config asks of its instances, read once per model (no TensorRT import here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.api import ConfigError, ModelParameters

if TYPE_CHECKING:
    from inferd.api import ModelConfig

ALLOCATION_PARAMETER = "execution_context_allocation_strategy"
_STRATEGIES = ("STATIC", "ON_PROFILE_CHANGE")


@dataclass(frozen=True, slots=True)
class TensorRTOptions:
    """Execution settings of one model, with Triton's defaults."""

    #: ``execution_context_allocation_strategy``: a ``trt.ExecutionContextAllocationStrategy`` name.
    allocation_strategy: str = "STATIC"
    #: ``optimization.input_pinned_memory`` / ``output_pinned_memory``: copy through pinned host buffers.
    pinned_inputs: bool = True
    pinned_outputs: bool = True


def parse_options(config: ModelConfig, model: str) -> TensorRTOptions:
    """Read the parameters and optimization settings; ConfigError names a bad value and the choices."""
    strategy = ModelParameters(config, model).get(ALLOCATION_PARAMETER, "STATIC").upper()
    if strategy not in _STRATEGIES:
        raise ConfigError(
            f"model '{model}': parameter {ALLOCATION_PARAMETER} is '{strategy}'; expected {' or '.join(_STRATEGIES)}"
        )
    return TensorRTOptions(
        allocation_strategy=strategy,
        pinned_inputs=config.optimization.input_pinned_memory.enable,
        pinned_outputs=config.optimization.output_pinned_memory.enable,
    )
