"""Decoded JSON headers of binary requests, kept so that a repeated header is read once.

A client of the binary tensor extension sends the same JSON header with every request of one
shape: the tensor bytes follow it. :class:`HeaderPlans` keeps what such a header said, once
``decode_request`` accepted it, keyed by its bytes; the next request with those bytes is built
from it without parsing or checking the JSON again. Only the checks that depend on the binary
part (its length, each tensor's size) run again, in the same order and with the same messages.
Headers with JSON ``data``, or with parameters that are not plain values, are never kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferRequest, InferTensor, RequestedOutput
from inferd.datatypes import array_from_bytes
from inferd.frontends.http.codec import decode_request, parse_json, trailing_bytes_error
from inferd.shared_memory import Regions

_PLAIN = (str, int, float, bool, type(None))


@dataclass(frozen=True, slots=True)
class _Input:
    name: str
    datatype: str
    shape: tuple[int, ...]
    size: int
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Plan:
    id: str
    parameters: dict[str, Any]
    inputs: tuple[_Input, ...]
    outputs: tuple[tuple[str, dict[str, Any]], ...]
    binary_output: bool


class HeaderPlans:
    """Decodes binary requests, reading each distinct JSON header once (at most ``limit`` kept)."""

    def __init__(self, limit: int = 256, longest: int = 4096, regions: Regions | None = None) -> None:
        self._plans: dict[bytes, _Plan] = {}
        #: Where inputs in shared memory are read (such headers are never kept: they carry no
        #: ``binary_data_size``).
        self._regions = regions
        self._limit = limit
        self._longest = longest

    def __len__(self) -> int:
        """How many headers are kept."""
        return len(self._plans)

    def decode(
        self, header: bytes | memoryview, binary: memoryview, model_name: str, model_version: str
    ) -> tuple[InferRequest, bool]:
        """``decode_request(parse_json(header), binary, ...)``, from the kept plan when there is one."""
        key = bytes(header)
        plan = self._plans.get(key)
        if plan is not None:
            return _build(plan, binary, model_name, model_version), plan.binary_output
        parsed = parse_json(key, "request", walk=False)  # decode_request checks what it keeps
        request, binary_output = decode_request(parsed, binary, model_name, model_version, self._regions)
        if len(key) <= self._longest:
            plan = _plan_of(parsed, request, binary_output)
            if plan is not None:
                if len(self._plans) >= self._limit:
                    self._plans.clear()
                self._plans[key] = plan
        return request, binary_output


def _plan_of(parsed: dict[str, Any], request: InferRequest, binary_output: bool) -> _Plan | None:
    """What ``request`` (just decoded from ``parsed``) took from its header; None when it may not
    be reused (JSON data, or parameters holding lists or objects)."""
    raw_inputs = parsed["inputs"]
    if not all(
        isinstance(raw.get("parameters"), dict) and "binary_data_size" in raw["parameters"] for raw in raw_inputs
    ):
        return None
    tensors = list(request.inputs.values())
    parameter_sets = [request.parameters, *(t.parameters for t in tensors), *(o.parameters for o in request.outputs)]
    if not all(isinstance(v, _PLAIN) for p in parameter_sets for v in p.values()):
        return None
    sizes = [raw["parameters"]["binary_data_size"] for raw in raw_inputs]
    # Copies: the request just decoded is the caller's, and may change its own dicts.
    inputs = tuple(
        _Input(t.name, t.datatype, t.shape, n, dict(t.parameters)) for t, n in zip(tensors, sizes, strict=True)
    )
    outputs = tuple((o.name, dict(o.parameters)) for o in request.outputs)
    return _Plan(request.id, dict(request.parameters), inputs, outputs, binary_output)


def _build(plan: _Plan, binary: memoryview, model_name: str, model_version: str) -> InferRequest:
    request = InferRequest(model_name, model_version, plan.id)
    if plan.parameters:
        request.parameters = dict(plan.parameters)
    inputs = request.inputs
    offset, end = 0, len(binary)
    for spec in plan.inputs:
        size = spec.size
        if offset + size > end:
            raise InvalidArgument(
                f"input '{spec.name}': binary_data_size {size} at offset {offset} runs past the "
                f"{end} bytes of binary data in the request"
            )
        try:
            array = array_from_bytes(binary[offset : offset + size], spec.datatype, spec.shape)
        except InvalidArgument as exc:
            raise InvalidArgument(f"input '{spec.name}': {exc.message}") from None
        offset += size
        params = dict(spec.parameters) if spec.parameters else {}
        inputs[spec.name] = InferTensor(spec.name, spec.datatype, spec.shape, array, params)
    if offset != end:
        raise trailing_bytes_error(end, offset)
    request.outputs = [RequestedOutput(name, dict(params)) for name, params in plan.outputs]
    return request
