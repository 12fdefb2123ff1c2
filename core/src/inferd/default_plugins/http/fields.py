"""Type checks of a JSON infer request's fields and ``parameters``, with Triton's sentences.

Triton parses these fields as typed JSON values and refuses a value of another kind; inferd does
the same instead of coercing (``bool("no")``, ``str(5)``), and adds which field and what it held.
A request without parameters pays one truth test.
"""

from __future__ import annotations

import json
from typing import Any

from inferd.errors import InvalidArgument

_UINT64 = 1 << 64
NON_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NON_BOOL = "attempt to access JSON non-boolean as boolean"
_NON_STRING = "attempt to access JSON non-string as string"
_BOOL_NAMES = ("binary_data_output", "sequence_start", "sequence_end")


def _is_uint64(value: Any) -> bool:
    return type(value) is int and 0 <= value < _UINT64


def unparsable(field: str, reason: str, value: Any, expected: str) -> InvalidArgument:
    """Triton's ``Unable to parse '<field>': <reason>``, then what was sent and what is expected."""
    return InvalidArgument(f"Unable to parse '{field}': {reason} (got {show(value)}; expected {expected})")


def check_parameters(parameters: dict[str, Any]) -> None:
    """Refuse the request parameters Triton types (``priority``, ``timeout``, ``binary_data_output``,
    the sequence ones) when they hold another kind; other parameters pass as they are."""
    for key, value in parameters.items():
        if key == "priority" or key == "timeout":
            if not _is_uint64(value):
                raise unparsable(key, NON_UINT, value, "an unsigned 64-bit integer")
        elif key in _BOOL_NAMES:
            if type(value) is not bool:
                raise unparsable(key, _NON_BOOL, value, "true or false")
        elif key == "sequence_id":
            if type(value) is not str and not _is_uint64(value):
                raise unparsable(key, _NON_STRING, value, "a string or an unsigned 64-bit integer")


def request_id(header: dict[str, Any]) -> str:
    """The request's ``id``: a string when present."""
    value = header.get("id", "")
    if type(value) is not str:
        raise unparsable("id", _NON_STRING, value, "a string")
    return value


def check_output_parameters(params: dict[str, Any]) -> None:
    """An output's ``binary_data`` must be a boolean."""
    value = params.get("binary_data", False)
    if type(value) is not bool:
        raise unparsable("binary_data", _NON_BOOL, value, "true or false")


def show(value: Any) -> str:
    """``value`` as JSON writes it, cut to 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:
        text = f"a {type(value).__name__} nested too deep to show"
    return text if len(text) <= 40 else text[:37] + "..."
