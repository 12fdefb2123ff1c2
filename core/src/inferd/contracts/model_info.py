"""What a frontend knows of a loaded model version: :class:`ModelInfo`.

The data plane hands one out per request (``DataPlane.resolve``); the frontend decodes against
it and passes it back (``DataPlane.infer(request, info)``), so the version it decoded for is the
version that runs, even when a reload lands in between. Built once per loaded version.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from inferd.contracts.errors import InferdError
    from inferd.contracts.stats import VersionStats
    from inferd.contracts.types import InferRequest, InferResponse
    from inferd.contracts.validation import RequestValidator, TensorSpec


class Servable(Protocol):
    """The loaded version behind a :class:`ModelInfo`; only the data plane calls it."""

    @property
    def stats(self) -> VersionStats: ...

    async def infer(self, request: InferRequest) -> InferResponse: ...


class Resolve(Protocol):
    """The data plane's ``resolve``: the version serving ``name``/``version`` now."""

    def __call__(self, name: str, version: str = "") -> ModelInfo: ...


class Infer(Protocol):
    """The data plane's ``infer``: one request to completion on ``model`` (resolved when not given)."""

    def __call__(self, request: InferRequest, model: ModelInfo | None = None) -> Awaitable[InferResponse]: ...


class Stream(Protocol):
    """The data plane's ``stream``: every response of one request; a failure arrives as an item."""

    def __call__(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]: ...


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """An input or output as model metadata reports it (``-1`` first when the model batches)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One loaded version as frontends see it: its signature, batching and transaction policy."""

    name: str
    version: int
    platform: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int
    decoupled: bool
    #: Checks a decoded request against the config; its ``inputs`` are the config's input specs.
    validator: RequestValidator = field(repr=False, compare=False)
    #: A weak reference to the version, opaque to frontends: the data plane runs requests on
    #: what it returns (None once the version is unloaded and gone).
    handle: weakref.ref[Servable] = field(repr=False, compare=False)

    @property
    def batching(self) -> bool:
        """Whether requests carry a leading batch dimension (``max_batch_size > 0``)."""
        return self.max_batch_size > 0

    def input_spec(self, name: str) -> TensorSpec | None:
        """The config's declaration of input ``name`` (dims without batch, reshape), if any."""
        return self.validator.inputs.get(name)
