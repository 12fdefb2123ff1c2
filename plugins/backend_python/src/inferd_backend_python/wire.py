"""inferd's requests, responses and errors as plain data for :mod:`inferd_backend_python.ipc`.

Both the server and the stub process use these: a request or response becomes a tuple of plain
values plus the descriptors of its tensors in the message's shared-memory block, and comes back as
the same inferd object with numpy views of that block as its tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from time import monotonic_ns
from typing import Any

from inferd.api import (
    WIRE_TO_NUMPY,
    ErrorKind,
    InferdError,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)
from inferd_backend_python.ipc import plain
from inferd_backend_python.shm import Block, Tensors, view

#: The fields this module (and pb_tensor) fill positionally: keywords and defaults cost twice as much.
_POSITIONAL = {
    InferRequest: (
        "model_name",
        "model_version",
        "id",
        "inputs",
        "outputs",
        "parameters",
        "arrival_ns",
        "response_sender",
        "context",
        "cancelled",
    ),
    InferTensor: ("name", "datatype", "shape", "data", "parameters"),
    RequestedOutput: ("name", "parameters"),
    InferResponse: ("model_name", "model_version", "id", "outputs", "parameters", "final"),
}
for _cls, _names in _POSITIONAL.items():
    if tuple(f.name for f in dataclasses.fields(_cls)) != _names:
        raise ImportError(f"the fields of {_cls.__name__} changed: update inferd_backend_python.wire")


def encode_request(request: InferRequest, tensors: Tensors) -> tuple[Any, ...]:
    params = request.parameters
    return (
        request.model_name,
        request.model_version,
        request.id,
        [(t.name, tensors.add(t.data, t.datatype)) for t in request.inputs.values()],
        [o.name for o in request.outputs] if request.outputs else (),
        plain(params) if params else {},
        request.response_sender is not None,
    )


def decode_request(
    item: tuple[Any, ...],
    block: Block,
    sender: Callable[..., None] | None = None,
    context: dict[str, Any] | None = None,
) -> InferRequest:
    """The request ``item`` names (its tensors: views of ``block``), with ``context`` (default: empty)."""
    name, version, rid, inputs, outputs, params, _ = item
    tensors = {}
    for tname, desc in inputs:
        array = view(desc, block, WIRE_TO_NUMPY)
        tensors[tname] = InferTensor(tname, desc[0], array.shape, array, {})
    # every field given, in order: a dataclass's defaults and keywords cost more than the fields
    return InferRequest(
        name,
        version,
        rid,
        tensors,
        [RequestedOutput(o, {}) for o in outputs],
        params,
        monotonic_ns(),
        sender,
        {} if context is None else context,
        False,
    )


def encode_error(error: BaseException) -> tuple[str, str, str]:
    if isinstance(error, InferdError):
        return ("e", error.message, error.kind.value)
    return ("e", f"{type(error).__name__}: {error}", ErrorKind.INTERNAL.value)


def decode_error(item: tuple[Any, ...]) -> InferdError:
    return InferdError(item[1], ErrorKind(item[2]))


def encode_outcome(outcome: InferResponse | InferdError | None, tensors: Tensors) -> tuple[Any, ...] | None:
    """A response, an error or nothing (a decoupled model's flag-only final)."""
    if outcome is None:
        return None
    if isinstance(outcome, InferdError):
        return encode_error(outcome)
    params = outcome.parameters
    return (
        "r",
        outcome.model_name,
        outcome.model_version,
        outcome.id,
        [(t.name, tensors.add(t.data, t.datatype)) for t in outcome.outputs],
        plain(params) if params else {},
        outcome.final,
    )


def decode_outcome(item: tuple[Any, ...] | None, block: Block) -> InferResponse | InferdError | None:
    if item is None:
        return None
    if item[0] == "e":
        return decode_error(item)
    _, name, version, rid, outputs, params, final = item
    tensors = []
    for tname, desc in outputs:
        array = view(desc, block, WIRE_TO_NUMPY)
        tensors.append(InferTensor(tname, desc[0], array.shape, array, {}))
    return InferResponse(name, version, rid, tensors, params, final)
