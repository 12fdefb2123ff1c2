"""A raw binary infer request (``Inference-Header-Content-Length: 0``), as Triton reads one.

The whole body is the tensor of the model's only input: its name and datatype come from the
config, its shape from the config's dims (one row first when the model batches), with the one
variable dimension, if any, deduced from the body's size. Every output comes back binary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferRequest, InferTensor
from inferd.datatypes import array_from_bytes, element_count, numpy_dtype

if TYPE_CHECKING:
    from inferd.contracts.model_info import ModelInfo
    from inferd.contracts.validation import TensorSpec


def decode_raw_request(body: bytes, info: ModelInfo, model_version: str) -> InferRequest:
    """The request a raw body makes for the version ``info`` describes."""
    specs = list(info.validator.inputs.values())
    if len(specs) != 1:
        raise InvalidArgument(
            f"Raw request must only have 1 input (found 1) to be deduced but got {len(specs)} inputs in "
            f"'{info.name}' model configuration (a raw binary body, Inference-Header-Content-Length: 0, "
            f"feeds a model with one input; send a JSON header naming the inputs)"
        )
    spec = specs[0]
    shape = _shape(spec, info.max_batch_size > 0, len(body))
    if spec.datatype == "BYTES":
        array = np.array([body], dtype=np.object_).reshape(shape)
    else:
        expected = element_count(shape) * numpy_dtype(spec.datatype).itemsize
        if expected != len(body):
            raise InvalidArgument(
                f"input byte size mismatch for input 'raw_input' for model '{info.name}'. Expected {expected}, "
                f"got {len(body)} (the raw body is input '{spec.name}', shape {list(shape)} of {spec.datatype})"
            )
        array = array_from_bytes(body, spec.datatype, shape)
    request = InferRequest(info.name, model_version, "")
    request.inputs[spec.name] = InferTensor(spec.name, spec.datatype, shape, array, {})
    return request


def _shape(spec: TensorSpec, batching: bool, size: int) -> tuple[int, ...]:
    shape = [1] if batching else []
    variable = [i for i, d in enumerate(spec.dims) if d == -1]
    if len(variable) > 1:
        raise InvalidArgument(
            f"The shape of the raw input '{spec.name}' can not be deduced because there are more than one "
            f"variable-sized dimension (dims {list(spec.dims)})"
        )
    fixed = element_count([d for d in spec.dims if d != -1])
    if spec.datatype == "BYTES":
        if variable or fixed != 1:
            raise InvalidArgument(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1] "
                f"(its dims are {list(spec.dims)})"
            )
        return (*shape, *spec.dims)
    dims = list(spec.dims)
    if variable:
        unit = fixed * numpy_dtype(spec.datatype).itemsize
        dims[variable[0]] = size // unit if unit else 0
    return (*shape, *dims)
