"""vLLM ``SamplingParams`` (and ``PoolingParams``) from a request's JSON, with errors that name the tensor and field."""

from __future__ import annotations

import typing
from typing import Any

from vllm import PoolingParams, SamplingParams
from vllm.exceptions import VLLMClientError
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

from inferd.api import InvalidArgument

_HIDDEN = {"output_kind", "skip_clone"}
#: The sampling parameters a client may set, with the type to convert a JSON string value to.
_FIELDS: dict[str, type | None] = {}
for _name in SamplingParams.__struct_fields__:
    if not _name.startswith("_") and _name not in _HIDDEN:
        _hint = typing.get_type_hints(SamplingParams).get(_name)
        _args = [a for a in typing.get_args(_hint) if a is not type(None)] or [_hint]
        _FIELDS[_name] = _args[0] if len(_args) == 1 and _args[0] in (int, float, bool) else None


def _convert(name: str, value: Any, where: str) -> Any:
    if name == "structured_outputs" and isinstance(value, dict):
        return StructuredOutputsParams(**value)
    if name == "logit_bias" and isinstance(value, dict):  # JSON keys are strings; vLLM's are token ids
        try:
            return {int(k): float(v) for k, v in value.items()}
        except (TypeError, ValueError):
            raise InvalidArgument(f"{where}: 'logit_bias' must map token ids to numbers") from None
    kind = _FIELDS[name]
    if kind is None or isinstance(value, kind) or value is None:
        return value
    if kind is bool and isinstance(value, str):
        return value.strip().lower() == "true"
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where}: '{name}' must be {kind.__name__}, got {value!r}") from None


def sampling_params(values: dict[str, Any], from_tensor: bool, stream: bool) -> SamplingParams:
    """Build the engine's sampling parameters; unknown keys are an error only from the tensor."""
    where = "input 'sampling_parameters'" if from_tensor else "request parameters"
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name in _FIELDS:
            kwargs[name] = _convert(name, value, where)
        elif from_tensor:
            raise InvalidArgument(f"{where}: unknown sampling parameter '{name}'")
    kind = RequestOutputKind.DELTA if stream else RequestOutputKind.CUMULATIVE
    try:
        return SamplingParams(**kwargs, output_kind=kind)
    except (TypeError, ValueError, VLLMClientError) as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


#: The pooling parameters a client may set (those of ``/v1/embeddings``), with their types.
_POOLING_FIELDS: dict[str, type] = {"dimensions": int, "use_activation": bool}


def pooling_params(values: dict[str, Any], from_tensor: bool) -> PoolingParams:
    """vLLM's ``PoolingParams`` for an embedding (task ``embed``, as ``vllm serve``'s ``/v1/embeddings``);
    unknown keys are an error only from the ``pooling_parameters`` tensor."""
    where = "input 'pooling_parameters'" if from_tensor else "request parameters"
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        kind = _POOLING_FIELDS.get(name)
        if kind is None:
            if from_tensor:
                raise InvalidArgument(
                    f"{where}: unknown pooling parameter '{name}' (known: dimensions, use_activation)"
                )
            continue
        if value is None:
            continue
        if kind is bool and isinstance(value, str):
            value = value.strip().lower() == "true"
        elif kind is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidArgument(f"{where}: '{name}' must be {kind.__name__}, got {value!r}")
        kwargs[name] = value
    return PoolingParams(task="embed", **kwargs)
