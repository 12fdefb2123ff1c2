"""Tensors, responses and errors as a Triton ``model.py`` sees them (``pb_utils.Tensor``...).

These classes re-implement the API of Triton's ``c_python_backend_utils`` (built in C++ inside
Triton's stub process) in plain Python over inferd's objects: an input ``Tensor`` is a view of the
numpy array inferd decoded from the wire, never a copy. ``triton_python_backend_utils`` re-exports
them under Triton's names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from inferd.api import (
    NUMPY_TO_WIRE,
    ErrorKind,
    InferdError,
    InferRequest,
    InferResponse,
    InferTensor,
    error_response,
    wire_datatype,
)

#: Wire datatype -> TRITONSERVER_DataType number (what ``Tensor.triton_dtype()`` returns).
WIRE_TO_TRITON_DTYPE: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}

_BYTES = "BYTES"


# --- errors -----------------------------------------------------------------------------------


class TritonModelException(Exception):
    """Raised by a model (or by this module) to fail ``initialize``, ``execute`` or ``finalize``."""


class TritonError(Exception):
    """An error attached to an ``InferenceResponse``; codes are Triton's ``TRITONSERVER_Error_Code``.

    Unlike Triton's it is also an exception, so ``raise pb_utils.TritonError(...)`` works too.
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if message is None or code is None:
            raise TypeError("TritonError needs a message and a code, not None")
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


_CODE_TO_KIND: dict[int, ErrorKind] = {
    TritonError.UNKNOWN: ErrorKind.UNKNOWN,
    TritonError.INTERNAL: ErrorKind.INTERNAL,
    TritonError.NOT_FOUND: ErrorKind.NOT_FOUND,
    TritonError.INVALID_ARG: ErrorKind.INVALID_ARG,
    TritonError.UNAVAILABLE: ErrorKind.UNAVAILABLE,
    TritonError.UNSUPPORTED: ErrorKind.UNSUPPORTED,
    TritonError.ALREADY_EXISTS: ErrorKind.ALREADY_EXISTS,
    TritonError.CANCELLED: ErrorKind.CANCELLED,
}
_KIND_TO_CODE: dict[ErrorKind, int] = {kind: code for code, kind in _CODE_TO_KIND.items()}


def error_to_inferd(error: Any) -> InferdError:
    """A ``TritonError`` (or anything a model put in ``error=``) as an :class:`InferdError`."""
    if isinstance(error, TritonError):
        return InferdError(error.message(), _CODE_TO_KIND.get(error.code(), ErrorKind.UNKNOWN))
    if isinstance(error, InferdError):
        return error
    return InferdError(str(error), ErrorKind.INTERNAL)


def error_from_inferd(error: InferdError) -> TritonError:
    return TritonError(error.message, _KIND_TO_CODE.get(error.kind, TritonError.UNKNOWN))


# --- tensors ----------------------------------------------------------------------------------


def _as_tensor_array(name: str, value: Any) -> tuple[np.ndarray, str]:
    """Normalise what a model passes to ``Tensor(name, value)`` (Triton makes it C-contiguous);
    the array and its wire datatype."""
    array = value if type(value) is np.ndarray else np.asarray(value)
    dtype = array.dtype
    datatype = NUMPY_TO_WIRE.get(dtype)
    if datatype is None:
        kind = dtype.kind
        if kind == "U":  # Triton rejects str arrays; inferd takes them as UTF-8 BYTES.
            encoded = np.empty(array.shape, dtype=np.object_)
            encoded.reshape(-1)[:] = [s.encode("utf-8") for s in array.reshape(-1)]
            return encoded, _BYTES
        try:
            datatype = wire_datatype(dtype)
        except InferdError:
            raise TritonModelException(
                f"tensor '{name}' has numpy dtype {dtype}, which has no Triton datatype"
            ) from None
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array, datatype


class _CapsuleSource:
    """Lets ``np.from_dlpack`` read a bare DLPack capsule (it only accepts ``__dlpack__`` objects)."""

    __slots__ = ("_capsule",)

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU; numpy fails clearly if the capsule is on a GPU


class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``; ``as_numpy()`` returns the array itself."""

    __slots__ = ("_array", "_datatype", "_name")
    _datatype: str | None  # the wire datatype, None until asked for (an array built by _wrap without one)

    def __init__(self, name: str, array: Any) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        self._name = name
        if type(array) is np.ndarray and array.flags.c_contiguous:  # the common case, without a call
            datatype = NUMPY_TO_WIRE.get(array.dtype)
            if datatype is not None:
                self._array, self._datatype = array, datatype
                return
        self._array, self._datatype = _as_tensor_array(name, array)

    @classmethod
    def _wrap(cls, name: str, array: np.ndarray, datatype: str | None = None) -> Tensor:
        """No-check constructor for arrays inferd already validated (request inputs)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._datatype = datatype
        return tensor

    def _wire_datatype(self) -> str:
        """The wire datatype of the array (BYTES for str, bytes and object arrays)."""
        datatype = self._datatype
        if datatype is None:
            datatype = self._datatype = wire_datatype(self._array.dtype)
        return datatype

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return WIRE_TO_TRITON_DTYPE[self._wire_datatype()]

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the array (a copy for read-only inputs: legacy DLPack lacks the flag)."""
        array = self._array
        if not array.flags.writeable:
            array = array.copy()
        return array.__dlpack__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        try:
            return self._array.__dlpack__(**kwargs)
        except BufferError:
            if self._array.flags.writeable:
                raise
            return self._array.copy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        """A tensor from a DLPack capsule or any object with ``__dlpack__`` (CPU memory only)."""
        source = dlpack if hasattr(dlpack, "__dlpack__") else _CapsuleSource(dlpack)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            raise TritonModelException(
                f"Tensor.from_dlpack('{name}'): {exc}; inferd's python backend keeps tensors in "
                "CPU memory, move GPU tensors to the CPU first"
            ) from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


def check_parameters(parameters: Any) -> dict[str, Any]:
    if not isinstance(parameters, dict):
        raise TritonModelException(f"parameters must be a dict, found {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(f"Expect parameters values to have type bool/int/str, found type {type(value)}")
    return dict(parameters)


# --- responses --------------------------------------------------------------------------------


class InferenceResponse:
    """The outputs of one request, or an error: ``InferenceResponse(output_tensors, error, parameters)``."""

    __slots__ = ("_error", "_outputs", "_parameters")

    def __init__(
        self,
        output_tensors: Iterable[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self._outputs = list(output_tensors) if output_tensors is not None else []
        self._error = error
        self._parameters = check_parameters(parameters) if parameters else {}

    @classmethod
    def _from_inferd(cls, response: InferResponse) -> InferenceResponse:
        out = cls.__new__(cls)
        out._outputs = [Tensor._wrap(t.name, t.data) for t in response.outputs]
        out._error = None
        out._parameters = dict(response.parameters)
        return out

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string (Triton's form)."""
        return json.dumps(self._parameters)


def response_to_inferd(
    response: Any, request: InferRequest, model_name: str, model_version: str
) -> InferResponse | InferdError:
    """Turn what a model returned for ``request`` into inferd's response, keeping asked-for outputs."""
    if not isinstance(response, InferenceResponse):
        raise TritonModelException(
            "Expected an 'InferenceResponse' object in the execute function return list, "
            f"found type '{type(response)}'."
        )
    if response._error is not None:  # counted a success, as Triton counts an error response
        error = error_to_inferd(response._error)
        return error_response(error.message, error.kind)
    produced = response._outputs
    wanted = request.outputs
    if len(wanted) == 1:  # one output asked for: the last tensor of that name, without a dict
        name = wanted[0].name
        produced = [t for t in produced if (type(t) is Tensor or isinstance(t, Tensor)) and t._name == name][-1:]
    elif wanted:
        by_name = {t._name: t for t in produced if type(t) is Tensor or isinstance(t, Tensor)}
        produced = [by_name[o.name] for o in wanted if o.name in by_name]
    tensors = []
    for t in produced:
        if type(t) is not Tensor and not isinstance(t, Tensor):
            raise TritonModelException(f"output_tensors must hold pb_utils.Tensor objects, found type '{type(t)}'")
        array = t._array
        tensors.append(InferTensor(t._name, t._datatype or t._wire_datatype(), array.shape, array, {}))
    return InferResponse(model_name, model_version, request.id, tensors, response._parameters)
