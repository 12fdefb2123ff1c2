"""Triton's generate extension: a flat JSON object <-> an inference request and its responses.

Request: every key naming a model input becomes that input, its shape worked out from the
model's config (a scalar is one element; a list is flattened unless its own shape already fits);
``"parameters"`` (an object) and every other key become request parameters. Response: each output
becomes one key (a single element as a scalar, more as a flat list, BYTES as text), next to
``model_name`` and ``model_version`` and the response's parameters, keys sorted as Triton sorts them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.datatypes import element_count
from inferd.frontends.http.codec import _json_data, parse_json
from inferd.frontends.http.fields import check_parameter, check_text, show
from inferd.frontends.http.json_tensors import json_array

if TYPE_CHECKING:
    from inferd.contracts.model_info import ModelInfo
    from inferd.contracts.validation import TensorSpec

#: What Triton answers when /generate meets a model that did not send exactly one response.
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
_PARAMETER_TYPES = (str, int, float, bool)
#: Triton's sentence for a ``"parameters"`` key that does not hold an object.
NOT_AN_OBJECT = "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"


def decode_generate(body: bytes, info: ModelInfo, model_version: str) -> InferRequest:
    """Build the request a ``generate`` body describes for the model version ``info``.

    ``id`` (a string) is the request's id, as Triton takes it, and is echoed in the response.
    A key given twice in one object is refused (which one would win is the parser's choice)."""
    doc = parse_json(body, "request")
    if not isinstance(doc, dict):
        raise InvalidArgument("generate request must be a JSON object")
    _refuse_duplicate_keys(body, info)
    request = InferRequest(info.name, model_version)
    for key, value in doc.items():
        spec = info.input_spec(key)
        if spec is not None:
            request.inputs[key] = _tensor(key, value, spec, info)
        elif key == "parameters":
            if not isinstance(value, dict):
                raise InvalidArgument(f"{NOT_AN_OBJECT}; got {show(value)}")
            for name, param in value.items():
                request.parameters[name] = _parameter(name, param, "Converting keyword: 'parameters': ")
        else:
            if key == "id":
                if type(value) is not str:
                    raise InvalidArgument(
                        f"Unable to parse 'id': attempt to access JSON non-string as string (got {show(value)})"
                    )
                request.id = value
            request.parameters[key] = _parameter(key, value)
    return request


def _parameter(name: str, value: Any, where: str = "") -> Any:
    """``value`` as a request parameter; ``where`` begins the sentence, as Triton's does for a
    parameter inside ``"parameters"``."""
    if value is None or not isinstance(value, _PARAMETER_TYPES):
        raise InvalidArgument(
            f"{where}parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )
    check_parameter(name, value)
    if not name.isascii():
        check_text(f"parameter name '{name}'", name)
    return value


class _Pairs(dict[str, Any]):
    """A JSON object that remembers the first key it was given twice."""

    __slots__ = ("twice",)
    twice: str | None


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs(pairs)
    out.twice = None
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                out.twice = key
                break
            seen.add(key)
    return out


def _twice(value: Any) -> str | None:
    """The first key given twice in ``value`` or in an object inside it, if any."""
    if isinstance(value, _Pairs):
        if value.twice is not None:
            return value.twice
        values: Any = value.values()
    elif isinstance(value, list):
        values = value
    else:
        return None
    for item in values:
        found = _twice(item)
        if found is not None:
            return found
    return None


def _refuse_duplicate_keys(body: bytes, info: ModelInfo) -> None:
    """A second, key-checking parse (the standard library's, which reports pairs); generate
    bodies are small, and the first parse already refused what is not JSON. An input given twice
    is Triton's sentence; any other key given twice in one object is refused too (Triton keeps one
    of the values)."""
    try:
        doc = json.loads(body, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        return  # the first parse accepted it (a form only orjson reads): no pairs to check
    twice = doc.twice if isinstance(doc, _Pairs) else None
    hint = "generate request has the key '{}' more than once in one object"
    if twice is not None and info.input_spec(twice) is not None:
        raise InvalidArgument(f"input '{twice}' already exists in request; {hint.format(twice)}")
    twice = _twice(doc)
    if twice is not None:
        raise InvalidArgument(hint.format(twice))


def _tensor(name: str, value: Any, spec: TensorSpec, info: ModelInfo) -> InferTensor:
    datatype = spec.datatype
    dims = spec.reshape if spec.reshape is not None else spec.dims
    expected = ((1,) if info.batching else ()) + dims  # a generate request is one row
    data = value if isinstance(value, list) else [value]
    natural = _natural_shape(data)
    flat: list[Any] | None
    shape: tuple[int, ...] | None
    if natural is not None and _fits(expected, natural):
        shape = natural
        flat = np.asarray(data, dtype=object).reshape(-1).tolist() if len(natural) > 1 else data
    else:
        flat = np.asarray(data, dtype=object).reshape(-1).tolist() if natural is not None else None
        shape = _resolve(expected, len(flat)) if flat is not None else None
        if shape is None or flat is None:
            raise InvalidArgument(
                f"generate: cannot convert input '{name}' of model '{info.name}' to a tensor of shape "
                f"{_fmt(expected)}: got {_describe(value)}"
            )
    return InferTensor(name, datatype, shape, json_array(flat, datatype, shape, name))


def _natural_shape(data: list[Any]) -> tuple[int, ...] | None:
    """The shape of a (possibly nested) rectangular JSON list; None when it is ragged."""
    try:
        array = np.asarray(data, dtype=object)
    except ValueError:
        return None
    if any(isinstance(x, list) for x in array.reshape(-1)):
        return None
    return tuple(array.shape)


def _fits(expected: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(expected) == len(shape) and all(e == -1 or e == s for e, s in zip(expected, shape, strict=True))


def _resolve(expected: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """``expected`` with its variable dimensions filled in to hold ``count`` elements."""
    known = element_count([d for d in expected if d != -1])
    variable = [i for i, d in enumerate(expected) if d == -1]
    if not variable:
        return expected if known == count else None
    if known == 0 or count % known:
        return None
    shape = [1 if d == -1 else d for d in expected]
    shape[variable[-1]] = count // known
    return tuple(shape)


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return f"a single {type(value).__name__}"


def _fmt(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def encode_generate(response: InferResponse) -> bytes:
    """One flat JSON object for a response (one SSE event, or the /generate body)."""
    body: dict[str, Any] = dict(response.parameters)
    for tensor in response.outputs:
        values = _json_data(tensor.data, tensor.datatype)
        body[tensor.name] = values[0] if len(values) == 1 else values
    body["model_name"] = response.model_name
    body["model_version"] = response.model_version
    if response.id:
        body["id"] = response.id
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def sse_event(data: bytes) -> bytes:
    """A server-sent event carrying one JSON object."""
    return b"data: " + data + b"\n\n"
