"""KServe v2 JSON and Triton's binary tensor extension <-> inferd requests and responses."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import numpy as np
import orjson

from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.datatypes import array_from_bytes, array_to_bytes, datatype_hint, numpy_dtype
from inferd.frontends.http.fields import (
    NON_UINT,
    check_output_parameters,
    check_parameters,
    request_id,
    show,
    unparsable,
)
from inferd.frontends.http.json_tensors import json_array
from inferd.frontends.http.utf8 import utf8_hint
from inferd.serving import MAX_JSON_DEPTH, TOO_DEEP, depth_problem, nested_deeper_than
from inferd.shared_memory import REGION, Regions, only_one_source, read_input, without_region

HEADER_LENGTH = "inference-header-content-length"
#: Largest tensor a request may declare (elements); beyond it the shape is refused before any
#: allocation. 2**31 matches Triton's own per-tensor limit of 2 GiB of BYTES.
MAX_ELEMENTS = 1 << 31
#: ``json.dumps(obj, separators=(",", ":"))`` without building an encoder per call.
compact_json = json.JSONEncoder(separators=(",", ":")).encode
_json_string = json.encoder.encode_basestring_ascii  # how json.dumps (ensure_ascii) writes a str


def header_size(header_length: str, body_length: int) -> int:
    """The value of ``Inference-Header-Content-Length``: 0 (a raw binary body) up to the body's length."""
    try:
        n = int(header_length)
    except ValueError:
        raise InvalidArgument(f"Inference-Header-Content-Length must be an integer, got '{header_length}'") from None
    if n < 0 or n > body_length:
        raise InvalidArgument(f"inference header size should be in range (0, {body_length}), got: {n}")
    return n


def split_body(body: bytes, header_length: int | None) -> tuple[bytes | memoryview, memoryview]:
    """Separate the JSON header (``header_length`` bytes, all when None) from the binary tensor
    data that follows it."""
    if header_length is None:
        return body, memoryview(b"")
    view = memoryview(body)
    return view[:header_length], view[header_length:]


#: Every digit as "0", so that one ``find`` of :data:`_NINETEEN_DIGITS` finds a long number.
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_DIGITS = b"0" * 19
_ZERO, _POINT, _SIGNS, _EXPONENTS = ord("0"), ord("."), b"+-", b"eE"


def parse_json(data: bytes | memoryview, what: str, *, walk: bool = True, long_as_text: bool = False) -> Any:
    """``data`` parsed, or InvalidArgument naming ``what`` ("request", ...).

    orjson parses numbers ~8x faster than the standard library (a request of 256 floats: 5
    against 41 µs), and where both accept a document they give the same values, except that
    orjson reads an integer beyond 64 bits as a float. So a body that may hold such an integer
    (:func:`_may_hold_long_integer`), and every body orjson refuses (it refuses some that the
    standard library accepts: NaN, lone surrogates, a byte-order mark), are parsed by the standard
    library: results and error messages stay what they were. A document nested deeper than
    ``inferd.serving.json_depth.MAX_JSON_DEPTH`` is refused, whichever parser read it; with ``walk``
    False (an infer request) only past the parsers' own limits: :func:`decode_request` then checks
    the values it keeps (``parameters``) itself, and ``data`` is checked against its shape. With
    ``long_as_text``, an integer literal of more than 18 digits is kept as its text (the caller
    refuses it in its own words); otherwise one past Python's limit (4300 digits) is refused.
    """
    raw = bytes(data) if isinstance(data, memoryview) else data
    if not _may_hold_long_integer(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if str(exc).startswith("depth limit"):  # past 1024 levels: the standard library would recurse
                raise InvalidArgument(f"failed to parse the {what} JSON buffer: {TOO_DEEP}") from None
        else:
            return _shallow(raw, value, what) if walk else value
    try:
        value = json.loads(raw, parse_int=_int_or_text if long_as_text else None)
    except RecursionError:
        raise InvalidArgument(f"failed to parse the {what} JSON buffer: {TOO_DEEP}") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"failed to parse the {what} JSON buffer: {exc}{utf8_hint(raw)}") from None
    except ValueError as exc:
        problem = _TOO_LONG if str(exc).startswith("Exceeds the limit") else exc
        raise InvalidArgument(f"failed to parse the {what} JSON buffer: {problem}") from None
    return _shallow(raw, value, what) if walk else value


_TOO_LONG = f"an integer has more than {sys.get_int_max_str_digits()} digits"


def _int_or_text(text: str) -> int | str:
    return int(text) if len(text) <= 18 else text


def _shallow(raw: bytes, value: Any, what: str) -> Any:
    """``value``, unless it nests deeper than ``inferd.serving.json_depth`` allows."""
    problem = depth_problem(raw, value)
    if problem:
        raise InvalidArgument(f"failed to parse the {what} JSON buffer: {problem}")
    return value


def _may_hold_long_integer(raw: bytes) -> bool:
    """Whether ``raw`` has a run of 19 or more digits that is not a fraction's or an exponent's
    (an integer literal of 19 digits may be beyond 64 bits; a string of digits counts too)."""
    digits = raw.translate(_DIGITS)
    start = digits.find(_NINETEEN_DIGITS)
    while start >= 0:
        before = digits[start - 1] if start else 0
        if before in _SIGNS and start > 1:
            before = digits[start - 2]
            if before not in _EXPONENTS:
                return True  # a negative (or signed) integer
        elif before != _POINT and before != _ZERO and before not in _EXPONENTS:
            return True  # ZERO: the rest of a run already judged
        start = digits.find(_NINETEEN_DIGITS, start + 19)
    return False


def _shape(raw: Any, name: str) -> tuple[int, ...]:
    if not isinstance(raw, list):
        _bad_shape(raw, name)
    count = 1
    for d in raw:
        if (type(d) is not int and (isinstance(d, bool) or not isinstance(d, int))) or d < 0:
            _bad_shape(raw, name)
        count *= d
    shape = tuple(raw)
    if count > MAX_ELEMENTS:
        raise InvalidArgument(
            f"input '{name}': shape {list(shape)} declares {count} elements, "
            f"more than the {MAX_ELEMENTS} a tensor may hold"
        )
    return shape


def _bad_shape(raw: Any, name: str) -> NoReturn:
    raise InvalidArgument(f"input '{name}': 'shape' must be a list of non-negative integers, got {raw!r}")


def decode_request(
    header: Any, binary: memoryview, model_name: str, model_version: str, regions: Regions | None = None
) -> tuple[InferRequest, bool]:
    """Build an InferRequest; also return the request-level ``binary_data_output`` flag.
    Inputs in shared memory are read from ``regions``."""
    if not isinstance(header, dict):
        raise InvalidArgument("inference request must be a JSON object")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgument(f"inference request for model '{model_name}' has no 'inputs' list")
    parameters = header.get("parameters", {})
    if type(parameters) is not dict:
        raise InvalidArgument(
            "failed to get request params.: attempt to get members for non-object "
            f"(request 'parameters' must be a JSON object, got {show(parameters)})"
        )
    if parameters:
        check_parameters(parameters)
        for value in parameters.values():
            if type(value) is dict or type(value) is list:
                _check_nesting(value, 2, "request 'parameters'")
    request = InferRequest(model_name, model_version, request_id(header))
    request.parameters = _without(parameters, "binary_data_output")
    inputs = request.inputs
    offset = 0
    for raw in raw_inputs:
        tensor, offset = _decode_input(raw, binary, offset, regions, model_name)
        if tensor.name in inputs:
            raise InvalidArgument(f"input '{tensor.name}' appears twice in the request")
        inputs[tensor.name] = tensor
    if offset != len(binary):
        raise trailing_bytes_error(len(binary), offset)
    raw_outputs = header.get("outputs") or []
    if not isinstance(raw_outputs, list):
        raise InvalidArgument("'outputs' must be a list")
    for raw in raw_outputs:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise InvalidArgument("every entry of 'outputs' needs a 'name'")
        params = raw.get("parameters") or {}
        if params:
            check_output_parameters(params)
            for value in params.values():
                if type(value) is dict or type(value) is list:
                    _check_nesting(value, 4, f"output '{raw['name']}' 'parameters'")
        request.outputs.append(RequestedOutput(raw["name"], dict(params)))
    return request, parameters.get("binary_data_output", False)


def _check_nesting(value: list[Any] | dict[str, Any], above: int, where: str) -> None:
    """Refuse a value of ``parameters`` (the object at level ``above`` of the document) that nests
    past ``MAX_JSON_DEPTH`` levels; callers come here only for a list or an object."""
    if nested_deeper_than(value, MAX_JSON_DEPTH - above):
        raise InvalidArgument(f"failed to parse the request JSON buffer: {TOO_DEEP} (in {where})")


def trailing_bytes_error(carried: int, declared: int) -> InvalidArgument:
    """The error of a request whose binary data is longer than its inputs declare."""
    return InvalidArgument(f"the request carries {carried} bytes of binary data but its inputs declare {declared}")


def _without(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of ``mapping`` without ``key``."""
    if not mapping:
        return {}
    out = dict(mapping)
    out.pop(key, None)
    return out


def _decode_input(
    raw: Any, binary: memoryview, offset: int, regions: Regions | None, model: str
) -> tuple[InferTensor, int]:
    """One entry of ``inputs``, its data read from ``binary`` at ``offset``, from its JSON
    ``data`` or from a shared-memory region; returns the tensor and the offset after its binary data."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise InvalidArgument("every entry of 'inputs' needs a 'name'")
    name = raw["name"]
    datatype = raw.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidArgument(f"input '{name}' has no 'datatype'")
    try:
        numpy_dtype(datatype)
    except InferdError:
        raise InvalidArgument(f"invalid datatype for input {name}: '{datatype}'; {datatype_hint(datatype)}") from None
    shape = _shape(raw.get("shape"), name)
    params = raw.get("parameters") or {}
    for value in params.values() if type(params) is dict else ():
        if type(value) is dict or type(value) is list:
            _check_nesting(value, 4, f"input '{name}' 'parameters'")
    if REGION in params:
        only_one_source("data" in raw, "binary_data_size" in params)
        array = read_input(regions, model, name, datatype, shape, params)
        return InferTensor(name, datatype, shape, array, without_region(params)), offset
    size = params.get("binary_data_size")
    if size is not None:
        if type(size) is not int or size < 0:
            raise unparsable("binary_data_size", NON_UINT, size, f"a byte count, for input '{name}'")
        if offset + size > len(binary):
            raise InvalidArgument(
                f"input '{name}': binary_data_size {size} at offset {offset} runs past the "
                f"{len(binary)} bytes of binary data in the request"
            )
        array = array_from_bytes(binary[offset : offset + size], datatype, shape, name, model)
        offset += size
    elif "data" in raw:
        array = json_array(raw["data"], datatype, shape, name)
    else:
        raise InvalidArgument(f"input '{name}' has neither 'data' nor binary_data_size")
    return InferTensor(name, datatype, shape, array, _without(params, "binary_data_size")), offset


def _json_data(array: np.ndarray, datatype: str) -> list[Any]:
    if datatype == "BYTES":
        return [
            x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x) for x in array.reshape(-1)
        ]
    return array.reshape(-1).tolist()


def encode_response(
    response: InferResponse, request: InferRequest, binary_output: bool
) -> tuple[list[bytes | memoryview], int | None]:
    """The HTTP body as parts (the JSON header, then each binary tensor's bytes, uncopied) and,
    when binary tensors follow, the JSON header's length.

    The header is written piece by piece, each value as ``json.dumps`` writes it, in the order
    a dict of the same fields would have: the same bytes without building and walking the dicts.
    """
    wants = {o.name: o.parameters for o in request.outputs} if request.outputs else None
    outputs = []
    chunks: list[bytes | memoryview] = []
    for tensor in response.outputs:
        params = wants.get(tensor.name) if wants else None
        binary = params.get("binary_data", binary_output) if params else binary_output
        entry = f'{{"name":{_js(tensor.name)},"datatype":{_js(tensor.datatype)},"shape":{_int_list(tensor.shape)}'
        if params and REGION in params:
            pass  # written into its shared-memory region (``OutputSinks``): no data here
        elif binary:
            raw = array_to_bytes(tensor.data, tensor.datatype)
            chunks.append(raw)
            if not tensor.parameters:  # the usual case, written without the JSON encoder
                outputs.append(f'{entry},"parameters":{{"binary_data_size":{len(raw)}}}}}')
                continue
            entry += ',"parameters":' + compact_json({**tensor.parameters, "binary_data_size": len(raw)})
            outputs.append(entry + "}")
            continue
        else:
            entry += ',"data":' + compact_json(_json_data(tensor.data, tensor.datatype))
        if tensor.parameters:
            entry += ',"parameters":' + compact_json(tensor.parameters)
        outputs.append(entry + "}")
    head = f'{{"model_name":{_js(response.model_name)},"model_version":{_js(response.model_version)}'
    if response.id:
        head += ',"id":' + _js(response.id)
    if response.parameters:
        head += ',"parameters":' + compact_json(response.parameters)
    header = (head + ',"outputs":[' + ",".join(outputs) + "]}").encode()
    return [header, *chunks], (len(header) if chunks else None)


def _js(value: Any) -> str:
    """``value`` as ``json.dumps`` writes it (strings through its own C escaper)."""
    return _json_string(value) if type(value) is str else compact_json(value)


def _int_list(values: tuple[int, ...] | list[int]) -> str:
    """A shape as ``json.dumps(list(values))`` writes it."""
    for v in values:
        if type(v) is not int:
            return compact_json(list(values))
    return "[" + ",".join(map(str, values)) + "]"
