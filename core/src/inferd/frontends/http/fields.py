"""Type checks of a JSON infer request's fields and ``parameters``, with Triton's sentences.

Triton parses these fields as typed JSON values and refuses a value of another kind; inferd does
the same instead of coercing (``bool("no")``, ``str(5)``), and adds which field and what it held.
A request without parameters pays one truth test.
"""

from __future__ import annotations

import json
from typing import Any

from inferd.contracts.errors import InvalidArgument

_UINT64 = 1 << 64
NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_BOOL = "attempt to access JSON non-boolean as boolean"
_NON_STRING = "attempt to access JSON non-string as string"
_BOOL_NAMES = ("binary_data_output", "sequence_start", "sequence_end")
_INT64 = 1 << 63
_SHM_REGION = "shared_memory_region"
_SHM_KEYS = frozenset((_SHM_REGION, "shared_memory_offset", "shared_memory_byte_size"))
#: Triton's sentence for a parameter value that is not a string, integer, boolean or number.
INVALID_PARAMETER = "parameter '{}' has invalid type. It should be either 'int', 'bool', or 'string'."
#: Triton's sentence for a request parameter named ``triton_...`` (reserved for the server's own use).
RESERVED_PREFIX = "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."


def _is_uint64(value: Any) -> bool:
    return type(value) is int and 0 <= value < _UINT64


def unparsable(field: str, reason: str, value: Any, expected: str) -> InvalidArgument:
    """Triton's ``Unable to parse '<field>': <reason>``, then what was sent and what is expected."""
    return InvalidArgument(f"Unable to parse '{field}': {reason} (got {show(value)}; expected {expected})")


def check_parameters(parameters: dict[str, Any]) -> None:
    """Refuse the request parameters Triton types (``priority``, ``timeout``, ``binary_data_output``,
    the sequence ones) when they hold another kind, and any named ``triton_...`` (as Triton does over
    HTTP); other parameters pass as they are."""
    for key, value in parameters.items():
        if key.startswith("triton_"):
            raise InvalidArgument(f"{RESERVED_PREFIX}; got '{key}'")
        if key == "priority" or key == "timeout":
            if not _is_uint64(value):
                raise unparsable(key, NON_UINT, value, "an unsigned 64-bit integer")
        elif key in _BOOL_NAMES:
            if type(value) is not bool:
                raise unparsable(key, _NON_BOOL, value, "true or false")
        elif key == "sequence_id":
            if type(value) is not str and not _is_uint64(value):
                raise unparsable(key, _NON_STRING, value, "a string or an unsigned 64-bit integer")
        else:
            check_parameter(key, value)
        if not key.isascii():
            check_text(f"parameter name '{key}'", key)


def check_parameter(key: str, value: Any) -> None:
    """A free parameter: a string, a boolean, a number, or an integer in the signed 64-bit range
    (Triton's ``SetTritonParameterFromJsonParameter``); lists, objects and null are refused, and
    so are integers beyond 64 bits (Triton would read them as an inexact double)."""
    kind = type(value)
    if kind is str:
        if not value.isascii():
            check_text(f"parameter '{key}'", value)
    elif kind is int:
        if not -_INT64 <= value < _INT64:
            raise InvalidArgument(
                INVALID_PARAMETER.format(key) + f"; the integer {show(value)} is outside the signed 64-bit range"
            )
    elif kind is not bool and kind is not float:
        raise InvalidArgument(INVALID_PARAMETER.format(key) + f"; got {show(value)}")


def check_text(what: str, text: str) -> None:
    """Refuse a string holding a lone surrogate (JSON ``\\ud800``, or the UTF-8 bytes ``ED A0 80``
    Python's JSON reader lets through): it is not Unicode text and cannot be sent on."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{what} is not valid UTF-8: it holds a surrogate code point U+{ord(text[exc.start]):04X} "
            f"at character {exc.start}"
        ) from None


def request_id(header: dict[str, Any]) -> str:
    """The request's ``id``: a string when present."""
    value = header.get("id", "")
    if type(value) is not str:
        raise unparsable("id", _NON_STRING, value, "a string")
    if not value.isascii():
        check_text("request 'id'", value)
    return value


def check_output_parameters(params: dict[str, Any]) -> None:
    """An output's ``binary_data`` must be a boolean; every other value a string, boolean, number
    or 64-bit integer (nested objects and lists are refused: Triton reads none). An output in a
    shared-memory region leaves its ``shared_memory_*`` values to the region's checks, which answer
    with Triton's sentences (an offset of 2^64 - 32 is Triton's "Invalid offset for shared memory
    region", not a type error)."""
    value = params.get("binary_data", False)
    if type(value) is not bool:
        raise unparsable("binary_data", _NON_BOOL, value, "true or false")
    in_region = _SHM_REGION in params
    for key, value in params.items():
        if key != "binary_data" and not (in_region and key in _SHM_KEYS):
            check_parameter(f"outputs.parameters.{key}", value)


def show(value: Any) -> str:
    """``value`` as JSON writes it, cut to 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:
        text = f"a {type(value).__name__} nested too deep to show"
    return text if len(text) <= 40 else text[:37] + "..."
