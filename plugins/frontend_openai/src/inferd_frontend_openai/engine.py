"""Runs one choice on an inferd model in-process, through the router's streaming API.

The model follows Triton's vLLM tensor convention: ``text_input`` (BYTES), and when declared
``stream`` and ``exclude_input_in_output`` (BOOL), ``sampling_parameters`` (BYTES, JSON),
``return_finish_reason`` / ``return_num_output_tokens`` (BOOL); it answers ``text_output``
(BYTES: the new text of each response), and ``finish_reason`` / ``num_output_tokens`` /
``num_input_tokens`` when asked. A model that declares ``input_ids`` (INT64, the vLLM backend's)
takes a prompt as token ids there.
Closing the iterator early (a stop string, a client gone) closes the inferd stream, which marks
the request cancelled for the model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferd.api import METERED, PICKED, InferdError, InferRequest, InferResponse, InferTensor

if TYPE_CHECKING:
    from inferd.api import ModelInfo, ServedModel


class StreamingDataPlane(Protocol):
    """The part of inferd's data plane this frontend calls."""

    def resolve(self, name: str, version: str = "") -> ModelInfo: ...
    async def is_ready(self) -> bool: ...
    def stream(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]: ...
    def served_model(self, name: str, version: str = "") -> ServedModel: ...
    def check_control(self) -> None: ...
    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None: ...
    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...


def is_text_model(info: ModelInfo) -> bool:
    """Whether ``info`` follows the convention: decoupled, ``text_input`` and ``text_output`` BYTES."""
    spec = info.input_spec("text_input")
    outputs = {t.name: t.datatype for t in info.outputs}
    return info.decoupled and spec is not None and spec.datatype == "BYTES" and outputs.get("text_output") == "BYTES"


def takes_ids(info: ModelInfo) -> bool:
    """Whether the model takes a prompt as token ids (an ``input_ids`` INT64 input)."""
    spec = info.input_spec("input_ids")
    return spec is not None and spec.datatype == "INT64"


def gives_logprobs(info: ModelInfo) -> bool:
    """Whether the model can send token log-probabilities (``return_logprobs`` -> ``logprobs``)."""
    return info.input_spec("return_logprobs") is not None and any(t.name == "logprobs" for t in info.outputs)


@dataclass
class Piece:
    """What one response of the model adds: new text, and what the backend said of it
    (``logprobs``: the JSON of its ``logprobs`` output)."""

    text: str
    finish_reason: str | None = None
    output_tokens: int | None = None
    logprobs: str | None = None
    input_tokens: int | None = None


def _tensor(info: ModelInfo, name: str, value: object, datatype: str) -> InferTensor | None:
    """A one-element input shaped as the model declares it; None when the model lacks it."""
    spec = info.input_spec(name)
    if spec is None:
        return None
    shape = ((1,) if info.batching else ()) + tuple(1 if d == -1 else d for d in spec.dims)
    dtype = np.object_ if datatype == "BYTES" else np.bool_
    return InferTensor(name, datatype, shape, np.array([value], dtype=dtype).reshape(shape))


def build_request(
    info: ModelInfo,
    prompt: str,
    sampling: dict[str, object],
    stream: bool,
    id: str = "",
    logprobs: bool = False,
    ids: list[int] | None = None,
) -> InferRequest:
    """The inferd request for one choice (``id``: the OpenAI response's, for logs and traces;
    ``ids``: the prompt's token ids, for a model that :func:`takes_ids`)."""
    request = InferRequest(info.name, str(info.version), id)
    request.context[METERED] = True  # the app meters the OpenAI usage it answers (inferd.auth.usage)
    request.context[PICKED] = True  # the catalog picked the version through the model's split: judge it
    values: tuple[tuple[str, object, str], ...] = (
        ("text_input", prompt.encode(), "BYTES"),
        ("stream", stream, "BOOL"),
        ("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
        ("exclude_input_in_output", True, "BOOL"),
        ("return_finish_reason", True, "BOOL"),
        ("return_num_output_tokens", True, "BOOL"),
        ("return_num_input_tokens", True, "BOOL"),
        ("return_logprobs", logprobs, "BOOL"),
    )
    for name, value, datatype in values:
        tensor = _tensor(info, name, value, datatype)
        if tensor is not None:
            request.inputs[name] = tensor
    if ids is not None:
        shape = ((1,) if info.batching else ()) + (len(ids),)
        request.inputs["input_ids"] = InferTensor("input_ids", "INT64", shape, np.asarray(ids, np.int64).reshape(shape))
    return request


def _text(response: InferResponse, name: str) -> str | None:
    tensor = response.output(name)
    if tensor is None or tensor.data.size == 0:
        return None
    item = tensor.data.reshape(-1)[0]
    return item.decode("utf-8", "replace") if isinstance(item, (bytes, bytearray)) else str(item)


def piece(response: InferResponse) -> Piece:
    """The :class:`Piece` one response carries."""
    reason = _text(response, "finish_reason")
    reason = reason if reason not in ("", "None") else None
    return Piece(
        _text(response, "text_output") or "",
        reason,
        _count(response, "num_output_tokens"),
        _text(response, "logprobs"),
        _count(response, "num_input_tokens"),
    )


def _count(response: InferResponse, name: str) -> int | None:
    tensor = response.output(name)
    return int(tensor.data.reshape(-1)[0]) if tensor is not None and tensor.data.size else None


async def run(dataplane: StreamingDataPlane, info: ModelInfo, request: InferRequest) -> AsyncIterator[Piece]:
    """Every :class:`Piece` of ``request``, up to the model's final response; an error the model
    sends is raised. Closing this iterator closes the inferd stream (the request is cancelled)."""
    stream = dataplane.stream(request, info)
    try:
        async for item in stream:
            if isinstance(item, InferdError):
                raise item
            if item.outputs:
                yield piece(item)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
