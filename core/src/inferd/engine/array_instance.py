"""A :class:`~inferd.contracts.backend.SyncInstance` for frameworks that compute one batch of
arrays at a time (public as ``inferd.api.ArrayInstance``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

import numpy as np

from inferd.contracts.backend import Outcome, SyncInstance
from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.datatypes import wire_datatype


class ArrayInstance(SyncInstance):
    """An instance for frameworks that compute one batch of arrays at a time.

    Subclasses implement :meth:`run`; this class concatenates the requests' inputs along the batch
    dimension (for models with ``max_batch_size > 0``), runs once, splits the outputs back and keeps
    only the outputs each request asked for.
    """

    def __init__(self, model_name: str, model_version: int, max_batch_size: int) -> None:
        self.model_name = model_name
        self.model_version = str(model_version)
        self.max_batch_size = max_batch_size

    @abc.abstractmethod
    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Compute outputs by name from inputs by name."""

    def execute(self, requests: Sequence[InferRequest]) -> list[Outcome]:
        if len(requests) == 1:
            try:
                outputs = self.run({n: t.data for n, t in requests[0].inputs.items()})
            except InferdError as exc:
                return [exc]
            return [self._response(requests[0], outputs)]
        try:
            batched = concat_inputs(requests, self.max_batch_size)
            outputs = self.run(batched)
        except InferdError as exc:
            return [exc for _ in requests]
        responses: list[Outcome] = []
        start = 0
        for request in requests:
            rows = request.batch_size(self.max_batch_size)
            part = {name: value[start : start + rows] for name, value in outputs.items()}
            start += rows
            responses.append(self._response(request, part))
        return responses

    def _response(self, request: InferRequest, outputs: Mapping[str, np.ndarray]) -> InferResponse:
        wanted = request.requested_output_names() or list(outputs)
        tensors = []
        for name in wanted:
            array = np.asarray(outputs[name])
            tensors.append(InferTensor(name, wire_datatype(array.dtype), tuple(array.shape), array))
        return InferResponse(self.model_name, self.model_version, request.id, tensors)


def concat_inputs(requests: Sequence[InferRequest], max_batch_size: int) -> dict[str, np.ndarray]:
    """Stack the inputs of several requests along the first (batch) dimension."""
    if max_batch_size <= 0:
        raise InvalidArgument("requests of a model without a batch dimension cannot be batched")
    names = list(requests[0].inputs)
    out: dict[str, np.ndarray] = {}
    for name in names:
        try:
            out[name] = np.concatenate([r.inputs[name].data for r in requests], axis=0)
        except (KeyError, ValueError) as exc:
            raise InvalidArgument(f"cannot batch input '{name}': {exc}") from None
    return out
