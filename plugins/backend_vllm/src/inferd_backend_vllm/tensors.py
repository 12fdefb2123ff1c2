"""The tensors of Triton's vLLM backend: what a request carries in, what a response carries out.

Pure numpy and inferd types (no vLLM import), so the config auto-completion stays light.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.api import InferRequest, InferTensor, InvalidArgument

#: (name, data type, dims): Triton's vLLM backend's inputs (no ``image``), and ``input_ids``: the
#: prompt as token ids (``text_input`` is then ignored; the OpenAI API sends a chat's rendered
#: tokens, and token-id prompts, through it).
INPUTS: tuple[tuple[str, str, int], ...] = (
    ("text_input", "TYPE_STRING", 1),
    ("stream", "TYPE_BOOL", 1),
    ("sampling_parameters", "TYPE_STRING", 1),
    ("exclude_input_in_output", "TYPE_BOOL", 1),
    ("return_finish_reason", "TYPE_BOOL", 1),
    ("return_cumulative_logprob", "TYPE_BOOL", 1),
    ("return_logprobs", "TYPE_BOOL", 1),
    ("return_num_input_tokens", "TYPE_BOOL", 1),
    ("return_num_output_tokens", "TYPE_BOOL", 1),
    ("input_ids", "TYPE_INT64", -1),
)
OUTPUTS: tuple[tuple[str, str, int], ...] = (
    ("text_output", "TYPE_STRING", -1),
    ("finish_reason", "TYPE_STRING", -1),
    ("cumulative_logprob", "TYPE_FP32", -1),
    ("logprobs", "TYPE_STRING", -1),
    ("num_input_tokens", "TYPE_UINT32", 1),
    ("num_output_tokens", "TYPE_UINT32", -1),
)
#: A pooling model's (``"runner": "pooling"`` in model.json, as ``vllm serve --runner pooling``):
#: the text in, its embedding out (``pooling_parameters``: vLLM's ``dimensions``, ``use_activation``).
POOLING_INPUTS: tuple[tuple[str, str, int], ...] = (
    ("text_input", "TYPE_STRING", 1),
    ("pooling_parameters", "TYPE_STRING", 1),
    ("return_num_input_tokens", "TYPE_BOOL", 1),
)
POOLING_OUTPUTS: tuple[tuple[str, str, int], ...] = (
    ("embedding", "TYPE_FP32", -1),
    ("num_input_tokens", "TYPE_UINT32", 1),
)
EXTRA_OUTPUTS = ("finish_reason", "cumulative_logprob", "logprobs", "num_input_tokens", "num_output_tokens")
STREAM_WITH_INPUT = "When streaming, `exclude_input_in_output` = False is not allowed."


@dataclass(frozen=True, slots=True)
class GenerateInputs:
    """One request's inputs, decoded: the prompt, the mode, the raw sampling parameters."""

    prompt: str
    #: The prompt as token ids (the ``input_ids`` input), or None: ``prompt`` is the text.
    token_ids: list[int] | None
    stream: bool
    prepend_input: bool
    sampling: dict[str, Any]
    #: True when ``sampling`` came from the ``sampling_parameters`` tensor (every key must be a
    #: sampling parameter); False when from the request's parameters (other keys are skipped).
    sampling_from_tensor: bool
    #: The extra outputs asked for (``finish_reason``, ``num_output_tokens``...).
    extras: frozenset[str]


def _first(request: InferRequest, name: str) -> Any:
    tensor = request.inputs.get(name)
    if tensor is None:
        return None
    data = np.asarray(tensor.data).reshape(-1)
    if data.size == 0:
        raise InvalidArgument(f"input '{name}' is empty")
    return data[0]


def _text(value: Any, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidArgument(f"input '{name}' is not valid UTF-8: {exc}") from None
    return str(value)


def decode_inputs(request: InferRequest) -> GenerateInputs:
    """Read Triton's vLLM backend inputs from ``request`` (``InvalidArgument`` names the tensor)."""
    prompt = _first(request, "text_input")
    if prompt is None:
        raise InvalidArgument("input 'text_input' is required")
    stream = bool(_first(request, "stream") or False)
    exclude = _first(request, "exclude_input_in_output")
    prepend = (not bool(exclude)) if exclude is not None else not stream
    if prepend and stream:
        raise InvalidArgument(STREAM_WITH_INPUT)
    extras = frozenset(n for n in EXTRA_OUTPUTS if bool(_first(request, "return_" + n) or False))
    sampling, from_tensor = _parameters(request, "sampling_parameters")
    ids = request.inputs.get("input_ids")
    token_ids = np.asarray(ids.data).reshape(-1).tolist() if ids is not None else None
    if token_ids is not None and not token_ids:
        raise InvalidArgument("input 'input_ids' is empty")
    return GenerateInputs(_text(prompt, "text_input"), token_ids, stream, prepend, sampling, from_tensor, extras)


def decode_pooling_inputs(request: InferRequest) -> GenerateInputs:
    """Read a pooling model's inputs (``text_input``, ``pooling_parameters``); ``sampling`` holds
    the pooling parameters."""
    prompt = _first(request, "text_input")
    if prompt is None:
        raise InvalidArgument("input 'text_input' is required")
    extras = (
        frozenset(("num_input_tokens",)) if bool(_first(request, "return_num_input_tokens") or False) else frozenset()
    )
    values, from_tensor = _parameters(request, "pooling_parameters")
    return GenerateInputs(_text(prompt, "text_input"), None, False, False, values, from_tensor, extras)


def _parameters(request: InferRequest, tensor: str) -> tuple[dict[str, Any], bool]:
    """The parameters of ``tensor`` (a JSON object), else the request's parameters (there, keys
    that are not the engine's parameters are left to their owners)."""
    raw = _first(request, tensor)
    if raw is None:
        return dict(request.parameters), False
    text = _text(raw, tensor)
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"input '{tensor}' is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"input '{tensor}' must be a JSON object, got {type(value).__name__}")
    return value, True


def bytes_tensor(name: str, items: Sequence[str]) -> InferTensor:
    """A BYTES tensor of UTF-8 strings."""
    data = np.array([s.encode("utf-8") for s in items], dtype=np.object_)
    return InferTensor(name, "BYTES", (len(items),), data)


def number_tensor(name: str, values: Sequence[float], dtype: type[np.generic], datatype: str) -> InferTensor:
    """A 1-D numeric tensor."""
    data = np.asarray(values, dtype=dtype)
    return InferTensor(name, datatype, (len(values),), data)


def logprobs_json(steps: Iterable[Mapping[int, Any] | None] | None) -> str:
    """One completion's logprobs as Triton's backend serialises them (``null`` when absent, and
    for a position vLLM has none for: its FlatLogprobs may hold None)."""
    if steps is None:
        return "null"
    return json.dumps([None if step is None else _step_json(step) for step in steps])


def _step_json(step: Mapping[int, Any]) -> dict[str, dict[str, Any]]:
    """One position's candidates: token id -> its logprob, rank and text."""
    return {
        str(tid): {"logprob": lp.logprob, "rank": lp.rank, "decoded_token": lp.decoded_token}
        for tid, lp in step.items()
    }
