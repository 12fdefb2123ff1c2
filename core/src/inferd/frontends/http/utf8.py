"""Which field of a JSON body holds bytes that are not UTF-8 (only for a body already refused)."""

from __future__ import annotations

import json
from typing import Any

_ESCAPED = ("\udc80", "\udcff")  # how ``surrogateescape`` decodes the bytes 0x80..0xff


def utf8_hint(body: bytes) -> str:
    """``" (in the string at inputs[0].data[1])"``, or "" when the body does not parse as JSON
    even with its bad bytes kept (or nests too deep to walk)."""
    try:
        path = _find(json.loads(body.decode("utf-8", "surrogateescape")), "")
    except (ValueError, RecursionError):  # RecursionError: nested too deep to say where
        return ""
    if path is None:
        return ""
    return f" (in the string at {path or 'the top level'}: JSON strings must be UTF-8)"


def _find(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if _has_escaped(value) else None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _find(item, f"{path}[{i}]")
            if found is not None:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if _has_escaped(key):
                return f"{where} (a key)"
            found = _find(item, where)
            if found is not None:
                return found
    return None


def _has_escaped(text: str) -> bool:
    low, high = _ESCAPED
    return any(low <= c <= high for c in text)
