"""Datatypes on the wire: their names (the protocol's, numpy's, the model config's), their sizes,
and the raw bytes of a tensor (``BYTES``: each element a 4-byte little-endian length, then its
bytes), as the binary extension and raw gRPC carry them."""

from __future__ import annotations

import struct

import numpy as np

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.hints import did_you_mean

#: Wire datatype name -> numpy dtype. BYTES is an object array of ``bytes``; BF16 only with ml_dtypes.
WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
try:  # bfloat16 exists in numpy only through ml_dtypes (installed with onnx, jax, tensorflow).
    import ml_dtypes as _ml_dtypes

    WIRE_TO_NUMPY["BF16"] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    pass

#: numpy dtype -> wire datatype name, for the fixed-size datatypes (:func:`wire_datatype` also maps
#: str, bytes and object arrays to BYTES, and names a dtype it cannot map).
NUMPY_TO_WIRE: dict[np.dtype, str] = {dt: name for name, dt in WIRE_TO_NUMPY.items()}

#: Every datatype name the protocol knows, in Triton's spelling.
WIRE_DATATYPES: tuple[str, ...] = (
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
)


def config_to_wire(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    name = config_type[5:] if config_type.startswith("TYPE_") else config_type
    return "BYTES" if name == "STRING" else name


def wire_to_config(wire: str) -> str:
    """``FP32`` -> ``TYPE_FP32``; ``BYTES`` -> ``TYPE_STRING``."""
    return "TYPE_STRING" if wire == "BYTES" else "TYPE_" + wire


def numpy_dtype(wire: str) -> np.dtype:
    """The numpy dtype for a wire datatype name; raises InvalidArgument for unknown names."""
    try:
        return WIRE_TO_NUMPY[wire]
    except KeyError:
        if wire == "BF16":
            raise InvalidArgument("datatype BF16 needs the 'ml_dtypes' package") from None
        raise InvalidArgument(f"unknown datatype '{wire}'; {datatype_hint(wire)}") from None


def datatype_hint(wire: str) -> str:
    """What to send instead of an unknown datatype name: the closest one and the valid ones."""
    if wire == "BF16":
        return "datatype BF16 needs the 'ml_dtypes' package"
    upper = wire.upper().removeprefix("TYPE_")  # fp32, TYPE_FP32, STRING: the config's spellings
    upper = "BYTES" if upper == "STRING" else upper
    close = f"did you mean '{upper}'?" if upper in WIRE_DATATYPES else did_you_mean(upper[:64], WIRE_DATATYPES)
    return f"{close + ' ' if close else ''}expected one of {', '.join(WIRE_DATATYPES)}"


def wire_datatype(dtype: np.dtype) -> str:
    """The wire datatype name for a numpy dtype (str/bytes/object arrays are BYTES)."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return NUMPY_TO_WIRE[dtype]
    except KeyError:
        raise InvalidArgument(f"numpy dtype {dtype} has no inference protocol datatype") from None


def element_size(wire: str) -> int:
    """Bytes per element for fixed-size datatypes; 0 for BYTES."""
    if wire == "BYTES":
        return 0
    if wire == "BF16":
        return 2
    return numpy_dtype(wire).itemsize


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# --- BYTES serialisation: each element is a 4-byte little-endian length followed by its bytes.


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Flatten a BYTES (object/str/bytes) array into the length-prefixed wire layout."""
    parts: list[bytes] = []
    pack = struct.Struct("<I").pack
    for item in array.reshape(-1):
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            item = str(item).encode("utf-8")
        parts.append(pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes_tensor(buffer: bytes | bytearray | memoryview, count: int | None = None) -> np.ndarray:
    """Parse the length-prefixed layout into a 1-D object array of ``bytes``.

    Raises InvalidArgument when the buffer is truncated or holds a different number of elements
    than ``count`` (when given).
    """
    view = memoryview(buffer)
    items: list[bytes] = []
    offset, end = 0, len(view)
    while offset < end:
        if offset + 4 > end:
            raise InvalidArgument("BYTES tensor data is truncated: an element length is cut short")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidArgument(
                f"BYTES tensor data is truncated: an element declares {length} bytes but only {end - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise InvalidArgument(f"BYTES tensor holds {len(items)} elements, its shape asks for {count}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


def array_to_bytes(array: np.ndarray, wire: str) -> bytes | memoryview:
    """The raw little-endian bytes of a tensor as the binary extension and raw gRPC carry them."""
    if wire == "BYTES":
        return serialize_bytes_tensor(array)
    array = np.ascontiguousarray(array)
    if not array.size:
        return b""
    if array.dtype.isbuiltin == 2:  # ml_dtypes' bfloat16 has no buffer format: its bytes, as uint8
        return array.reshape(-1).view(np.uint8).data
    return array.data.cast("B")


def array_from_bytes(
    buffer: bytes | bytearray | memoryview, wire: str, shape: tuple[int, ...], name: str = "", model: str = ""
) -> np.ndarray:
    """A numpy view (no copy) over raw tensor bytes; validates the size against the shape.

    With the input's ``name`` and ``model``, a size mismatch is refused with Triton's sentences
    (``input byte size mismatch for input 'X' for model 'm'. Expected 32, got 40``, or for BYTES
    the number of string elements the length prefixes give), the detail after ``; ``."""
    count = element_count(shape)
    if wire == "BYTES":
        if not name:
            return deserialize_bytes_tensor(buffer, count).reshape(shape)
        try:
            return deserialize_bytes_tensor(buffer, count).reshape(shape)
        except InvalidArgument as exc:
            raise InvalidArgument(_bytes_sentence(buffer, count, name, model) + f"; {exc.message}") from None
    dtype = numpy_dtype(wire)
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        detail = f"holds {len(buffer)} bytes of data, but shape {list(shape)} of {wire} needs {expected}"
        if not name:
            raise InvalidArgument(detail)
        raise InvalidArgument(
            f"input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, "
            f"got {len(buffer)}; the input {detail}"
        )
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _bytes_sentence(buffer: bytes | bytearray | memoryview, count: int, name: str, model: str) -> str:
    """Triton's ``ValidateBytesInputs`` sentence for length prefixes that do not give ``count``
    elements filling ``buffer`` exactly."""
    view, offset, seen = memoryview(buffer), 0, 0
    while offset < len(view):
        if len(view) - offset < 4:
            return (
                f"incomplete string length indicator for inference input '{name}' for model '{model}', expecting 4 "
                f"bytes but only {len(view) - offset} bytes available. Please make sure the string length indicator "
                "is in one buffer."
            )
        seen += 1
        if seen > count:
            return (
                f"unexpected number of string elements {seen} for inference input '{name}' for model '{model}', "
                f"expecting {count}"
            )
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4 + length
    return f"expected {count} string elements for inference input '{name}' for model '{model}', got {seen}"
