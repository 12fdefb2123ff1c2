"""The ``data`` of a JSON input as a numpy array, without silent coercion.

Each element must have the JSON kind its datatype reads (integers for INT*/UINT*, numbers for
FP*, ``true``/``false`` for BOOL, strings for BYTES) and fit it; ``data`` is a flat list, or lists
nested exactly as the shape. Anything else is refused with Triton's sentence first, then which
input, which element and what it held. The checks run in C (``set(map(type, ...))`` and numpy);
only a refused request walks its elements in Python, to name the first bad one.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, NoReturn

import numpy as np

from inferd.contracts.errors import InvalidArgument
from inferd.datatypes import element_count, numpy_dtype
from inferd.frontends.http.fields import show

_SIGNED = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
_UNSIGNED = "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
_NUMBER = "Unable to parse 'data': attempt to access JSON non-number as double"
_BOOLEAN = "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
_STRING = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
_NOT_ARRAY = "Unable to parse 'data': attempt to access JSON non-array as array"

_INTS = frozenset({int})
#: datatype -> (the Python types its JSON elements may have, Triton's sentence for any other).
KINDS: dict[str, tuple[frozenset[type], str]] = {
    **dict.fromkeys(("INT8", "INT16", "INT32", "INT64"), (_INTS, _SIGNED)),
    **dict.fromkeys(("UINT8", "UINT16", "UINT32", "UINT64"), (_INTS, _UNSIGNED)),
    **{t: (frozenset({int, float}), _NUMBER) for t in ("FP16", "BF16", "FP32", "FP64")},
    "BOOL": (frozenset({bool}), _BOOLEAN),
    "BYTES": (frozenset({str}), _STRING),
}
_EXPECTED = {
    _SIGNED: "an integer",
    _UNSIGNED: "an integer >= 0",
    _NUMBER: "a number",
    _BOOLEAN: "true or false",
    _STRING: "a string",
}


def json_array(data: Any, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``data`` (parsed JSON) as an array of ``datatype`` and ``shape``; InvalidArgument if it
    is not exactly that."""
    if type(data) is not list:
        raise InvalidArgument(f"{_NOT_ARRAY} (input '{name}': 'data' must be a list, got {show(data)})")
    kinds, sentence = KINDS[datatype]
    found = set(map(type, data))
    nested = False
    if not found <= kinds:
        if list in found:
            data, nested = _flatten(data, shape, name), True
            found = set(map(type, data))
        if not found <= kinds:
            _bad_kind(data, kinds, sentence, datatype, shape if nested else None, name)
    count = element_count(shape)
    if len(data) != count:
        raise InvalidArgument(f"input '{name}': shape {list(shape)} needs {count} elements in 'data', got {len(data)}")
    if datatype == "BYTES":
        return _bytes_array(data, name).reshape(shape)
    try:
        array = np.asarray(data, dtype=numpy_dtype(datatype))
    except OverflowError:
        _out_of_range(data, datatype, sentence, shape if nested else None, name)
    return array.reshape(shape)


def _flatten(data: list[Any], shape: tuple[int, ...], name: str) -> list[Any]:
    """The leaves of ``data`` nested as ``shape`` (each level a list of that dimension's length)."""
    if not shape:
        raise InvalidArgument(f"input '{name}': shape [] takes a flat list of 1 element in 'data', got nested lists")
    items: list[Any] = [data]
    for depth, dim in enumerate(shape):
        for pos, item in enumerate(items):
            if type(item) is not list or len(item) != dim:
                where = _index(pos, shape[:depth]) if depth else ""
                got = f"{len(item)} elements" if type(item) is list else show(item)
                raise InvalidArgument(
                    f"Unable to parse 'data': Shape does not match true shape of 'data' field "
                    f"(input '{name}': nested 'data' must follow shape {list(shape)}: data{where} "
                    f"should be a list of {dim} elements, got {got}; or send a flat list)"
                )
        items = list(chain.from_iterable(items))
    return items


def _bad_kind(
    flat: list[Any], kinds: frozenset[type], sentence: str, datatype: str, shape: tuple[int, ...] | None, name: str
) -> NoReturn:
    i = next(i for i, v in enumerate(flat) if type(v) not in kinds)
    raise InvalidArgument(
        f"{sentence} (input '{name}', {datatype}: data{_index(i, shape)} is {show(flat[i])}, "
        f"expected {_EXPECTED[sentence]})"
    )


def _out_of_range(flat: list[Any], datatype: str, sentence: str, shape: tuple[int, ...] | None, name: str) -> NoReturn:
    dtype = numpy_dtype(datatype)
    low: float
    high: float
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)
    else:
        low, high = -float(np.finfo(dtype).max), float(np.finfo(dtype).max)
    i = next(i for i, v in enumerate(flat) if not low <= v <= high)
    where = f"data{_index(i, shape)} is {show(flat[i])}"
    if dtype.kind == "u" and flat[i] < 0:
        raise InvalidArgument(f"{sentence} (input '{name}', {datatype}: {where}, expected {_EXPECTED[sentence]})")
    raise InvalidArgument(f"input '{name}': {where}, out of range for {datatype} [{low}, {high}]")


def _bytes_array(flat: list[str], name: str) -> np.ndarray:
    out = np.empty(len(flat), dtype=np.object_)
    try:
        out[:] = [s.encode("utf-8") for s in flat]
    except UnicodeEncodeError:
        i = next(i for i, s in enumerate(flat) if not _encodes(s))
        raise InvalidArgument(
            f"failed to parse the request JSON buffer: The surrogate pair in string is invalid. "
            f"(input '{name}': data[{i}] holds a lone UTF-16 surrogate escape)"
        ) from None
    return out


def _encodes(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _index(pos: int, shape: tuple[int, ...] | None) -> str:
    """``[i]`` in a flat list (``shape`` None), ``[i][j]...`` for position ``pos`` of nested ``shape``."""
    if not shape:
        return f"[{pos}]"
    return "".join(f"[{int(i)}]" for i in np.unravel_index(pos, shape))
