"""Model warmup (config ``model_warmup``): requests run on every instance before the version is
served, as Triton does. Data comes from zeros, random values, or files under ``<model>/warmup/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferTensor
from inferd.datatypes import array_from_bytes, config_to_wire, element_count, numpy_dtype

if TYPE_CHECKING:
    from inferd.engine.version import ModelVersion


def _dtype_name(warmup_input: Any) -> str:
    field = warmup_input.DESCRIPTOR.fields_by_name["data_type"]
    return config_to_wire(field.enum_type.values_by_number[warmup_input.data_type].name)


def _sample(model: str, model_dir: Path | None, name: str, spec: Any, rng: np.random.Generator) -> np.ndarray:
    """One row of warmup data for input ``name`` (its dims, no batch dimension)."""
    wire = _dtype_name(spec)
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"model '{model}': warmup input '{name}' needs fixed dims, got {list(dims)}")
    count = element_count(dims)
    choice = spec.WhichOneof("input_data_type")
    if choice == "input_data_file":
        path = (model_dir or Path(".")) / "warmup" / spec.input_data_file
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise InvalidArgument(
                f"model '{model}': warmup input '{name}': cannot read {path}: {exc.strerror}"
            ) from None
        try:
            return array_from_bytes(raw, wire, dims).copy()
        except InvalidArgument as exc:
            raise InvalidArgument(f"model '{model}': warmup input '{name}' file {path}: {exc.message}") from None
    if wire == "BYTES":
        out = np.empty(count, dtype=np.object_)
        out[:] = [
            b"0" if choice != "random_data" else bytes(rng.integers(97, 123, 8, dtype=np.uint8)) for _ in range(count)
        ]
        return out.reshape(dims)
    dtype = numpy_dtype(wire)
    if choice == "random_data":
        if dtype.kind == "f":
            return rng.random(dims).astype(dtype)
        if dtype.kind == "b":
            return rng.integers(0, 2, dims).astype(dtype)
        return rng.integers(0, 100, dims).astype(dtype)
    return np.zeros(dims, dtype=dtype)


def warmup_requests(mv: ModelVersion) -> list[tuple[str, int, InferRequest]]:
    """``(warmup name, count, request)`` for each ``model_warmup`` entry of the config."""
    rng = np.random.default_rng(0)
    out = []
    batched = mv.max_batch_size > 0
    for index, entry in enumerate(mv.config.model_warmup):
        label = entry.name or f"#{index}"
        rows = max(1, entry.batch_size)
        request = InferRequest(mv.name, str(mv.version), f"warmup {label}")
        for name, spec in entry.inputs.items():
            try:
                row = _sample(mv.name, mv.model_dir, name, spec, rng)
            except InvalidArgument as exc:
                raise InvalidArgument(f"warmup '{label}': {exc.message}") from None
            data = np.stack([row] * rows) if batched else row
            request.inputs[name] = InferTensor(name, _dtype_name(spec), tuple(data.shape), data)
        out.append((label, max(1, entry.count), request))
    return out


async def warm_up(mv: ModelVersion) -> None:
    """Run every warmup request on every instance; a failure fails the load, naming the warmup."""
    if not mv.config.model_warmup:
        return
    for label, count, request in warmup_requests(mv):
        for runner in mv.runners:
            for _ in range(count):
                execution = await runner.execute([request])
                result = execution.results[0] if execution.results else None
                if isinstance(result, InferdError):
                    raise InvalidArgument(
                        f"model '{mv.name}' version {mv.version}: warmup '{label}' failed on instance "
                        f"'{runner.spec.name}': {result.message}"
                    )
