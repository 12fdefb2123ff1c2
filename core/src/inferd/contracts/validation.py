"""What a frontend knows of how a request is checked: the config's tensors (:class:`TensorSpec`)
and the checker (:class:`RequestValidator`, core's in ``inferd.engine.validation``).

Messages follow Triton's (same facts, same order) so that clients and scripts that match on them
keep working, and they always name the model, the tensor and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from inferd.contracts.types import InferRequest


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """An input or output as the config declares it (wire datatype, dims without batch)."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool = False
    reshape: tuple[int, ...] | None = None
    allow_ragged: bool = False


class RequestValidator(Protocol):
    """Checks a decoded request against one model version's config (``ModelInfo.validator``)."""

    @property
    def model(self) -> str:
        """The model's name, as messages quote it."""
        ...

    @property
    def max_batch_size(self) -> int: ...

    @property
    def inputs(self) -> Mapping[str, TensorSpec]:
        """The config's inputs by name (dims without the batch dimension)."""
        ...

    @property
    def outputs(self) -> Mapping[str, TensorSpec]:
        """The config's outputs by name."""
        ...

    def validate(self, request: InferRequest) -> None:
        """Raise ``InvalidArgument`` naming the model, the tensor and what was expected."""
        ...
