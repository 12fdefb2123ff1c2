"""KServe v2 protobuf messages <-> inferd requests and responses.

The tensor bytes never go through protobuf objects: :func:`split_infer_request` cuts the
``raw_input_contents`` fields out of the serialized request and hands them on as memoryviews over
the bytes gRPC received (numpy then views them without a copy), and :func:`serialize_infer` /
:func:`serialize_stream` write ``raw_output_contents`` fields straight after the protobuf header,
so each output tensor is copied once, into the outgoing message.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

import numpy as np

from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.datatypes import array_from_bytes, array_to_bytes, datatype_hint, element_count, numpy_dtype
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.parameter_checks import ENABLE_EMPTY_FINAL, check_request_parameters
from inferd.shared_memory import REGION, Regions, read_input, without_region

#: Largest tensor a request may declare (elements), as in the HTTP frontend; beyond it the shape
#: is refused before any allocation.
MAX_ELEMENTS = 1 << 31

_RAW_INPUT_FIELD = 7  # ModelInferRequest.raw_input_contents
_RAW_OUTPUT_TAG = b"\x32"  # ModelInferResponse.raw_output_contents: field 6, length-delimited
_STREAM_RESPONSE_TAG = b"\x12"  # ModelStreamInferResponse.infer_response: field 2, length-delimited

#: Which ``InferTensorContents`` field carries each datatype (FP16/BF16 travel only raw, as in Triton).
CONTENTS_FIELD: dict[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_ALL_CONTENTS_FIELDS = tuple(sorted(set(CONTENTS_FIELD.values())))

FINAL_RESPONSE = "triton_final_response"


# -- wire helpers ---------------------------------------------------------------------------------


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class WireRequest:
    """A ModelInferRequest without its tensor bytes (``header``, parsed on first use of
    ``message``), plus those bytes as views (``raw``)."""

    __slots__ = ("header", "raw", "error", "_message")

    def __init__(self, header: bytes | memoryview, raw: list[memoryview], error: str = "") -> None:
        self.header = header
        self.raw = raw
        self.error = error
        self._message: pb.ModelInferRequest | None = None

    @property
    def message(self) -> pb.ModelInferRequest | None:
        """The parsed header; None (and ``error`` set) when it is not a ModelInferRequest."""
        if self._message is None and not self.error:
            try:
                self._message = pb.ModelInferRequest.FromString(self.header)
            except Exception as exc:
                self.error = f"failed to parse the ModelInferRequest message: {exc}"
        return self._message


def split_infer_request(data: bytes | memoryview) -> WireRequest:
    """gRPC deserializer for ModelInferRequest: raw contents stay views over ``data``.

    Never raises: a malformed message comes back with ``error`` set, so the handler can answer
    INVALID_ARGUMENT instead of gRPC's generic deserialization failure.
    """
    try:
        view = memoryview(data)
        raw: list[memoryview] = []
        kept: list[memoryview] = []
        pos, keep_from, end = 0, 0, len(data)
        while pos < end:
            field_start = pos
            key, pos = _read_varint(data, pos)
            wire_type = key & 7
            if wire_type == 2:
                length, pos = _read_varint(data, pos)
                stop = pos + length
                if stop > end:
                    raise ValueError("a field runs past the end of the message")
                if key >> 3 == _RAW_INPUT_FIELD:
                    kept.append(view[keep_from:field_start])
                    raw.append(view[pos:stop])
                    keep_from = stop
                pos = stop
            elif wire_type == 0:
                _, pos = _read_varint(data, pos)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            else:
                raise ValueError(f"unsupported wire type {wire_type}")
        if pos != end:
            raise ValueError("truncated message")
        header: bytes | memoryview
        if raw:
            kept.append(view[keep_from:])
            header = b"".join(kept)
        else:
            header = data  # no tensor bytes to cut out: the message as received, uncopied
        return WireRequest(header, raw)
    except Exception as exc:
        return WireRequest(b"", [], f"failed to parse the ModelInferRequest message: {exc}")


class WireResponse:
    """A ModelInferResponse header (no tensor bytes) and the raw bytes of each output, in order."""

    __slots__ = ("header", "raw")

    def __init__(self, header: pb.ModelInferResponse, raw: list[bytes | memoryview]) -> None:
        self.header = header
        self.raw = raw


def response_parts(response: WireResponse) -> tuple[list[bytes | memoryview], int]:
    """The serialized ModelInferResponse as pieces to join (no tensor copy yet), and its size."""
    header = response.header.SerializeToString()
    parts: list[bytes | memoryview] = [header]
    size = len(header)
    for chunk in response.raw:
        prefix = _RAW_OUTPUT_TAG + _varint(len(chunk))
        parts.append(prefix)
        parts.append(chunk)
        size += len(prefix) + len(chunk)
    return parts, size


def serialize_infer(response: WireResponse) -> bytes:
    """gRPC serializer for ModelInfer: header, then one raw_output_contents field per output."""
    return b"".join(response_parts(response)[0])


def serialize_stream(item: WireResponse | pb.ModelStreamInferResponse) -> bytes:
    """gRPC serializer for ModelStreamInfer: an infer_response, or an error message."""
    if isinstance(item, pb.ModelStreamInferResponse):
        return item.SerializeToString()
    parts, size = response_parts(item)
    return b"".join([_STREAM_RESPONSE_TAG, _varint(size), *parts])


# -- parameters -----------------------------------------------------------------------------------


def param_value(param: Any) -> Any:
    """The Python value of an InferParameter / ModelRepositoryParameter (None when unset)."""
    which = param.WhichOneof("parameter_choice")
    return None if which is None else getattr(param, which)


def params_to_dict(params: Mapping[str, Any]) -> dict[str, Any]:
    return {key: param_value(value) for key, value in params.items()}


def set_param(param: pb.InferParameter, value: Any) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, (int, np.integer)):
        value = int(value)
        if value >= 1 << 63:
            param.uint64_param = value
        else:
            param.int64_param = value
    elif isinstance(value, (float, np.floating)):
        param.double_param = float(value)
    elif isinstance(value, (bytes, bytearray)):
        param.string_param = bytes(value).decode("utf-8", "replace")
    else:
        param.string_param = str(value)


def fill_params(target: Any, params: Mapping[str, Any]) -> None:
    for key, value in params.items():
        set_param(target[key], value)


# -- ModelInferRequest -> InferRequest ------------------------------------------------------------


def decode_shape(shape: Iterable[int], name: str) -> tuple[int, ...]:
    dims = tuple(shape)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"input '{name}': shape {list(dims)} has a negative dimension")
    count = element_count(dims)
    if count > MAX_ELEMENTS:
        raise InvalidArgument(
            f"input '{name}': shape {list(dims)} declares {count} elements, "
            f"more than the {MAX_ELEMENTS} a tensor may hold"
        )
    return dims


def _typed_array(contents: pb.InferTensorContents, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """An input sent in the typed ``contents`` fields (a copy: protobuf owns those values)."""
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidArgument(
            f"input '{name}': datatype {datatype} cannot be sent in 'contents'; send it in raw_input_contents"
        )
    for other in _ALL_CONTENTS_FIELDS:
        if other != field and len(getattr(contents, other)):
            raise InvalidArgument(
                f"input '{name}': unexpected explicit tensor data in '{other}' for datatype {datatype}, "
                f"expected '{field}'"
            )
    values = getattr(contents, field)
    count = element_count(shape)
    if len(values) != count:
        raise InvalidArgument(
            f"input '{name}': shape {list(shape)} needs {count} elements, '{field}' holds {len(values)}"
        )
    if datatype == "BYTES":
        out = np.empty(count, dtype=np.object_)
        out[:] = list(values)
        return out.reshape(shape)
    try:
        return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)
    except (OverflowError, ValueError) as exc:
        raise InvalidArgument(f"input '{name}': '{field}' values do not fit {datatype}: {exc}") from None


def _shm_input(
    tensor: pb.ModelInferRequest.InferInputTensor, params: dict[str, Any], regions: Regions | None, model: str
) -> InferTensor:
    """An input whose bytes are in a shared-memory region (it takes no raw_input_contents)."""
    name = tensor.name
    if tensor.HasField("contents"):
        raise InvalidArgument(f"input '{name}': 'contents' must not be set when the input is in shared memory")
    shape = decode_shape(tensor.shape, name)
    array = read_input(regions, model, name, tensor.datatype, shape, params)
    return InferTensor(name, tensor.datatype, shape, array, without_region(params))


def decode_request(wire: WireRequest, regions: Regions | None = None) -> InferRequest:
    """Build an InferRequest from a split ModelInferRequest; inputs in shared memory are read
    from ``regions``."""
    msg = wire.message
    if msg is None:
        raise InvalidArgument(wire.error)
    request = InferRequest(msg.model_name, msg.model_version, msg.id)
    if msg.parameters:
        check_request_parameters(msg.parameters)
        request.parameters = params_to_dict(msg.parameters)
        if ENABLE_EMPTY_FINAL in request.parameters:  # the frontend's flag, not the model's (as Triton)
            request.context[ENABLE_EMPTY_FINAL] = request.parameters.pop(ENABLE_EMPTY_FINAL)
    raw = wire.raw
    used = 0
    for tensor in msg.inputs:
        name = tensor.name
        datatype = tensor.datatype
        try:
            numpy_dtype(datatype)
        except InferdError:
            raise InvalidArgument(
                f"invalid datatype for input '{name}': '{datatype}'; {datatype_hint(datatype)}"
            ) from None
        params = params_to_dict(tensor.parameters) if tensor.parameters else {}
        if REGION in params:
            if name in request.inputs:
                raise InvalidArgument(f"input '{name}' appears twice in the request")
            request.inputs[name] = _shm_input(tensor, params, regions, msg.model_name)
            continue
        shape = decode_shape(tensor.shape, name)
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgument(
                    f"contents field must not be specified when using raw_input_contents for '{name}' for model "
                    f"'{msg.model_name}'; send every input in raw_input_contents, or none"
                )
            if used >= len(raw):
                raise InvalidArgument(
                    f"input '{name}': the request has {len(msg.inputs)} inputs but only {len(raw)} raw_input_contents"
                )
            array = array_from_bytes(raw[used], datatype, shape, name, msg.model_name)
            used += 1
        elif tensor.HasField("contents"):
            array = _typed_array(tensor.contents, datatype, shape, name)
        elif element_count(shape) == 0:
            array = np.empty(shape, dtype=numpy_dtype(datatype))
        else:
            raise InvalidArgument(f"input '{name}': no data (neither raw_input_contents nor contents)")
        if name in request.inputs:
            raise InvalidArgument(f"input '{name}' appears twice in the request")
        request.inputs[name] = InferTensor(name, datatype, shape, array, params)
    if used != len(raw):
        raise InvalidArgument(
            f"the request has {len(raw)} raw_input_contents but {len(msg.inputs)} inputs to take them"
        )
    for out in msg.outputs:
        params = params_to_dict(out.parameters) if out.parameters else {}
        request.outputs.append(RequestedOutput(out.name, params))
    return request


# -- InferResponse -> ModelInferResponse ----------------------------------------------------------


def encode_response(
    response: InferResponse, final: bool | None = None, in_regions: Container[str] = ()
) -> WireResponse:
    """Header and raw output bytes; ``final`` sets ``triton_final_response`` (streams only).
    Outputs named in ``in_regions`` were written to shared memory: their raw contents are empty."""
    header = pb.ModelInferResponse(model_name=response.model_name, model_version=response.model_version, id=response.id)
    if response.parameters:
        fill_params(header.parameters, response.parameters)
    if final is not None:
        header.parameters[FINAL_RESPONSE].bool_param = final
    raw: list[bytes | memoryview] = []
    for tensor in response.outputs:
        out = header.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            fill_params(out.parameters, tensor.parameters)
        raw.append(b"" if in_regions and tensor.name in in_regions else array_to_bytes(tensor.data, tensor.datatype))
    return WireResponse(header, raw)


def final_empty_response(request: InferRequest, model_version: str) -> WireResponse:
    """The empty response flagged final that ends a stream when the client asked for one."""
    header = pb.ModelInferResponse(model_name=request.model_name, model_version=model_version, id=request.id)
    header.parameters[FINAL_RESPONSE].bool_param = True
    return WireResponse(header, [])


def stream_error(message: str, request: InferRequest | None = None) -> pb.ModelStreamInferResponse:
    """An error inside a stream: the stream stays open; ``infer_response`` names the request."""
    item = pb.ModelStreamInferResponse(error_message=message)
    if request is not None:
        item.infer_response.model_name = request.model_name
        item.infer_response.model_version = request.model_version
        item.infer_response.id = request.id
    return item
