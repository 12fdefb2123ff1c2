"""``triton_python_backend_utils`` for inferd: the module Triton ``model.py`` files import as ``pb_utils``.

The names and behaviour follow Triton's python_backend; the implementation runs in the server's
own process (see ``inferd_backend_python``). Importing this module outside a server works, so a
``model.py`` can be unit-tested with plain Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inferd.api import deserialize_bytes_tensor as _deserialize
from inferd.api import serialize_bytes_tensor as _serialize
from inferd_backend_python.pb_config import ModelConfig
from inferd_backend_python.pb_metrics import Metric, MetricFamily
from inferd_backend_python.pb_request import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponseSender,
    Logger,
    PreferredMemory,
    current_binding,
)
from inferd_backend_python.pb_tensor import InferenceResponse, Tensor, TritonError, TritonModelException

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numbers <-> numpy types.
_TRITON_TO_NUMPY: dict[int, Any] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}
_NUMPY_TO_TRITON: dict[np.dtype, int] = {np.dtype(t): code for code, t in _TRITON_TO_NUMPY.items()}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (``TYPE_STRING`` -> ``np.object_``)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """A TRITONSERVER_DataType number (``Tensor.triton_dtype()``) -> numpy type, or None."""
    return _TRITON_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy type or dtype -> TRITONSERVER_DataType number, or None when there is none."""
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind == "S":
        return 13
    return _NUMPY_TO_TRITON.get(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """Flatten a BYTES tensor (object or ``np.bytes_`` array) into length-prefixed bytes.

    Returns ``()`` for an empty tensor and None for other dtypes, as Triton's does.
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return _serialize(input_tensor)
    return None


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """Parse length-prefixed bytes into a 1-D object array of ``bytes``."""
    return _deserialize(encoded_tensor)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input named ``name`` of a request, or None."""
    for tensor in inference_request.inputs():
        if tensor._name == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The output named ``name`` of a response, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry named ``name`` of a config dict (``json.loads(args['model_config'])``)."""
    entries: list[dict[str, Any]] = model_config.get("input", [])
    for entry in entries:
        if entry["name"] == name:
            return entry
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry named ``name`` of a config dict, or None."""
    entries: list[dict[str, Any]] = model_config.get("output", [])
    for entry in entries:
        if entry["name"] == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether a config dict sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def get_model_dir() -> str:
    """The directory of the model being run (``<repository>/<model>``)."""
    binding = current_binding()
    if binding is None:
        raise TritonModelException("get_model_dir() is only available while a model is loaded")
    return str(binding.model_dir)


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Not supported yet: load models through the repository API instead."""
    raise TritonModelException(f"pb_utils.load_model('{model_name}') is not supported by inferd yet")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Not supported yet: unload models through the repository API instead."""
    raise TritonModelException(f"pb_utils.unload_model('{model_name}') is not supported by inferd yet")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Not supported yet."""
    raise TritonModelException(f"pb_utils.is_model_ready('{model_name}') is not supported by inferd yet")
