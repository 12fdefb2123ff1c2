"""Checks a decoded request against its model's configuration before it is queued (frontends
see the checker as :class:`~inferd.contracts.validation.RequestValidator`).

Messages follow Triton's (same facts, same order) so that clients and scripts that match on them
keep working, and they always name the model, the tensor and what was expected.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NoReturn

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferRequest
from inferd.contracts.validation import TensorSpec
from inferd.datatypes import config_to_wire, numpy_dtype

if TYPE_CHECKING:
    from inferd.config import ModelConfig


def _spec(tensor: object, is_input: bool) -> TensorSpec:
    reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None  # type: ignore[attr-defined]
    return TensorSpec(
        name=tensor.name,  # type: ignore[attr-defined]
        datatype=config_to_wire(_enum_name(tensor)),
        dims=tuple(tensor.dims),  # type: ignore[attr-defined]
        optional=bool(getattr(tensor, "optional", False)) if is_input else False,
        reshape=reshape,
        allow_ragged=bool(getattr(tensor, "allow_ragged_batch", False)) if is_input else False,
    )


def _enum_name(tensor: object) -> str:
    field = tensor.DESCRIPTOR.fields_by_name["data_type"]  # type: ignore[attr-defined]
    return str(field.enum_type.values_by_number[tensor.data_type].name)  # type: ignore[attr-defined]


def _dims_match(expected: tuple[int, ...], got: tuple[int, ...]) -> bool:
    if expected == got:
        return True
    return len(expected) == len(got) and all(e == -1 or e == g for e, g in zip(expected, got, strict=True))


def _quoted(names: Iterable[str]) -> str:
    """``['A','B']``: Triton's list of tensor names."""
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _fmt(dims: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


class Validator:
    """Precomputed from a config once per model version; validates every request."""

    def __init__(self, config: ModelConfig, model_name: str) -> None:
        self.model = model_name
        self.max_batch_size = config.max_batch_size
        self.inputs = {t.name: _spec(t, True) for t in config.input}
        self.outputs = {t.name: _spec(t, False) for t in config.output}
        self.required = [n for n, s in self.inputs.items() if not s.optional]
        # Inputs fed by the sequence batcher's control tensors and implicit state are not sent by
        # the client; they are filled in by the scheduler.
        self.implicit: set[str] = set()
        if config.WhichOneof("scheduling_choice") == "sequence_batching":
            for c in config.sequence_batching.control_input:
                self.implicit.add(c.name)
            for s in config.sequence_batching.state:
                self.implicit.add(s.input_name)

    def validate(self, request: InferRequest) -> None:
        """Raise InvalidArgument naming the model, the tensor and what was expected."""
        model = self.model
        batch = None
        for name, tensor in request.inputs.items():
            spec = self.inputs.get(name)
            if spec is None:
                raise InvalidArgument(
                    f"unexpected inference input '{name}' for model '{model}'; "
                    f"it has inputs: {', '.join(self.inputs) or 'none'}"
                )
            if tensor.datatype != spec.datatype:
                raise InvalidArgument(
                    f"inference input '{name}' data-type is '{tensor.datatype}', "
                    f"but model '{model}' expects '{spec.datatype}'"
                )
            shape = tensor.shape
            if self.max_batch_size > 0:
                if not shape:
                    raise InvalidArgument(
                        f"inference input '{name}' for model '{model}' has no batch dimension: "
                        f"the model batches (max_batch_size {self.max_batch_size}), so shape must be "
                        f"[batch]+{_fmt(spec.dims)}"
                    )
                rows = shape[0]
                if batch is None:
                    batch = rows
                    if rows == 0:
                        self._empty_batch(spec, shape[1:])
                elif rows != batch and not spec.allow_ragged:
                    raise InvalidArgument(
                        f"inputs of model '{model}' disagree on the batch size: "
                        f"input '{name}' has {rows} rows, an earlier input has {batch}"
                    )
                shape = shape[1:]
            if not spec.allow_ragged and not _dims_match(spec.dims, shape):
                full_expected = ([-1] if self.max_batch_size > 0 else []) + list(spec.dims)
                raise InvalidArgument(
                    f"unexpected shape for input '{name}' for model '{model}'. "
                    f"Expected {_fmt(full_expected)}, got {_fmt(list(tensor.shape))}"
                    + self._batch_hint(spec, tensor.shape)
                )
        if batch is not None and batch > self.max_batch_size:
            raise InvalidArgument(
                f"inference request batch-size must be <= {self.max_batch_size} for '{model}', got {batch}"
            )
        inputs = request.inputs
        for required in self.required:
            if required not in inputs and required not in self.implicit:
                self._missing(request)
        outputs = self.outputs
        for out in request.outputs:
            if out.name not in outputs:
                raise InvalidArgument(
                    f"unexpected inference output '{out.name}' for model '{model}'; "
                    f"it has outputs: {', '.join(self.outputs) or 'none'}"
                )

    def _empty_batch(self, spec: TensorSpec, dims: tuple[int, ...]) -> NoReturn:
        """Triton's refusal of a batch of 0 rows: it reads the input as one row and finds no data."""
        count = 1
        for d in dims:
            count *= d
        if spec.datatype == "BYTES":
            first = (
                f"expected {count} string elements for inference input '{spec.name}' for model '{self.model}', got 0"
            )
        else:
            first = (
                f"input byte size mismatch for input '{spec.name}' for model '{self.model}'. "
                f"Expected {count * numpy_dtype(spec.datatype).itemsize}, got 0"
            )
        raise InvalidArgument(
            f"{first} (the batch dimension of input '{spec.name}' is 0: a request to a model that batches "
            f"carries at least one row, max_batch_size {self.max_batch_size})"
        )

    def _missing(self, request: InferRequest) -> NoReturn:
        """Triton's sentence: ``expected 3 inputs`` (or ``expected number of inputs between 3 and
        4`` when some are optional) ``... Got input(s) ['A'], but missing required input(s)
        ['B','C']``, names quoted and joined without spaces as Triton prints them."""
        implicit = self.implicit
        missing = [n for n in self.required if n not in request.inputs and n not in implicit]
        total = sum(1 for n in self.inputs if n not in implicit)
        required = sum(1 for n in self.required if n not in implicit)
        expected = (
            f"expected {total} inputs"
            if total == required
            else f"expected number of inputs between {required} and {total}"
        )
        raise InvalidArgument(
            f"{expected} but got {len(request.inputs)} inputs for model '{self.model}'. Got input(s) "
            f"{_quoted(request.inputs)}, but missing required input(s) {_quoted(missing)}. "
            "Please provide all required input(s)."
        )

    def _batch_hint(self, spec: TensorSpec, shape: tuple[int, ...]) -> str:
        """Explain the implicit batch dimension, the most common shape mistake."""
        if self.max_batch_size > 0 and _dims_match(spec.dims, shape):
            return (
                f" (the model batches, max_batch_size {self.max_batch_size}: "
                f"add a leading batch dimension, e.g. {_fmt([1, *shape])})"
            )
        if self.max_batch_size == 0 and len(shape) == len(spec.dims) + 1 and _dims_match(spec.dims, shape[1:]):
            return " (the model has max_batch_size 0: send the shape without a batch dimension)"
        return ""
