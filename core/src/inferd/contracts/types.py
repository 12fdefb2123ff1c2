"""Tensors, requests and responses: the objects that flow through the server.

Tensors are numpy arrays. ``BYTES`` tensors are numpy ``object`` arrays whose items are ``bytes``
(Triton's Python backend uses the same representation). Nothing here knows a wire format; the
frontends turn HTTP/gRPC messages into these objects and back (the datatypes' names, sizes and
raw bytes: :mod:`inferd.datatypes`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inferd.datatypes import wire_datatype


@dataclass(slots=True)
class InferTensor:
    """A named tensor: input or output of an inference."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, datatype: str | None = None) -> InferTensor:
        array = np.asarray(array)
        return cls(name, datatype or wire_datatype(array.dtype), tuple(array.shape), array)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (binary_data, classification)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


#: ``request.context`` key set by a caller that picked the request's version through the model's
#: split itself (:meth:`ModelTable.routed`: the OpenAI frontend, which needs the version's tokenizer
#: first; engine.traffic): the request names that version, and the canary policy still judges it.
PICKED = "inferd.split_picked"


@dataclass(slots=True)
class InferRequest:
    """One inference request, already decoded from the wire.

    ``model_version`` is ``""`` when the client left the choice to the version policy.
    ``outputs`` empty means "every output of the model". ``response_sender`` is set by the data
    plane for decoupled models: a thread-safe callable taking ``(response | error, final: bool)``.
    """

    model_name: str
    model_version: str = ""
    id: str = ""
    inputs: dict[str, InferTensor] = field(default_factory=dict)
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    arrival_ns: int = field(default_factory=time.monotonic_ns)
    response_sender: Callable[..., None] | None = None
    #: Free slot for schedulers and backends to hang per-request state on (sequence slot, state...).
    context: dict[str, Any] = field(default_factory=dict)
    #: Set once the client went away before the final response (a decoupled stream closed early,
    #: a call cancelled or past its deadline, an HTTP client gone): what a model's ``is_cancelled()``
    #: reads.
    cancelled: bool = False

    def batch_size(self, max_batch_size: int) -> int:
        """Rows in this request: the first dimension when the model batches, else 1."""
        if max_batch_size <= 0 or not self.inputs:
            return 1
        first = next(iter(self.inputs.values()))
        return first.shape[0] if first.shape else 1

    def requested_output_names(self) -> list[str]:
        return [o.name for o in self.outputs]


@dataclass(slots=True)
class InferResponse:
    """The outputs of one request (or one of the responses of a decoupled model)."""

    model_name: str
    model_version: str
    id: str = ""
    outputs: list[InferTensor] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    #: False on the responses of a decoupled model that the model did not flag as its last.
    final: bool = True

    def output(self, name: str) -> InferTensor | None:
        for o in self.outputs:
            if o.name == name:
                return o
        return None
