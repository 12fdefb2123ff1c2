"""Decoded ModelInfer headers, kept so that a repeated header is read once.

A gRPC client sends the same ModelInferRequest around different tensor bytes request after
request: same model, same inputs (names, datatypes, shapes), same outputs. The codec already cuts
the ``raw_input_contents`` out of the message; :class:`RequestPlans` keeps what the rest said,
once :func:`~inferd.frontends.grpc.codec.decode_request` accepted it, keyed by its bytes,
and builds the next request with those bytes from it, without parsing the protobuf or checking it
again. Only what depends on the tensor bytes (each one's size against its shape) is checked again,
with the same messages. Headers with parameters (request, input or output ones: sequence ids,
shared-memory regions, classification...) or typed ``contents`` are never kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferd.contracts.types import InferRequest, InferTensor, RequestedOutput
from inferd.datatypes import array_from_bytes
from inferd.frontends.grpc.codec import WireRequest, decode_request
from inferd.shared_memory import Regions


@dataclass(frozen=True, slots=True)
class _Plan:
    model_name: str
    model_version: str
    id: str
    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    outputs: tuple[str, ...]

    def build(self, raw: list[memoryview]) -> InferRequest:
        request = InferRequest(self.model_name, self.model_version, self.id)
        inputs = request.inputs
        for (name, datatype, shape), data in zip(self.inputs, raw, strict=True):
            array = array_from_bytes(data, datatype, shape, name, self.model_name)
            inputs[name] = InferTensor(name, datatype, shape, array, {})
        request.outputs = [RequestedOutput(name, {}) for name in self.outputs]
        return request


class RequestPlans:
    """Decodes ModelInfer requests, reading each distinct header once (at most ``limit`` kept)."""

    def __init__(self, limit: int = 256, longest: int = 4096) -> None:
        self._plans: dict[bytes, _Plan] = {}
        self._limit = limit
        self._longest = longest

    def __len__(self) -> int:
        """How many headers are kept."""
        return len(self._plans)

    def decode(self, wire: WireRequest, regions: Regions | None = None) -> InferRequest:
        """``decode_request(wire, regions)``, from the kept plan when there is one."""
        header = wire.header
        key = header if type(header) is bytes else bytes(header) if len(header) <= self._longest else None
        plan = self._plans.get(key) if key is not None else None
        if plan is not None and len(plan.inputs) == len(wire.raw):
            return plan.build(wire.raw)
        request = decode_request(wire, regions)
        if key is not None and plan is None and len(key) <= self._longest:
            plan = _plan_of(wire, request)
            if plan is not None:
                if len(self._plans) >= self._limit:
                    self._plans.clear()
                self._plans[key] = plan
        return request


def _plan_of(wire: WireRequest, request: InferRequest) -> _Plan | None:
    """What ``request`` (just decoded from ``wire``) took from its header; None when it may not
    be reused (parameters anywhere, or tensors that did not all come in raw_input_contents)."""
    msg = wire.message
    if msg is None or msg.parameters or not wire.raw or len(wire.raw) != len(msg.inputs):
        return None
    if any(t.parameters or t.HasField("contents") for t in msg.inputs) or any(o.parameters for o in msg.outputs):
        return None
    inputs = tuple((t.name, t.datatype, t.shape) for t in request.inputs.values())
    return _Plan(request.model_name, request.model_version, request.id, inputs, tuple(o.name for o in request.outputs))
