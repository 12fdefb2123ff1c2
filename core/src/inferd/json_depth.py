"""How deep a client's JSON document may nest arrays and objects.

A KServe request nests a tensor's ``data`` as deep as its shape has dimensions, plus three levels
(the request, ``inputs``, the input); nothing a client sends needs more than :data:`MAX_JSON_DEPTH`.
Deeper documents are refused when parsed: a document thousands of levels deep makes the standard
library's parser raise ``RecursionError``, and one a few hundred deep breaks any later code that
walks or prints it (``repr``, ``json.dumps``), so nothing past the parser ever sees one.
"""

from __future__ import annotations

from typing import Any

#: Deepest nesting of arrays and objects read from a client's JSON document.
MAX_JSON_DEPTH = 64
TOO_DEEP = f"arrays and objects are nested more than {MAX_JSON_DEPTH} levels deep (at most {MAX_JSON_DEPTH} are read)"


def depth_problem(raw: bytes, value: Any) -> str:
    """:data:`TOO_DEEP` when ``value`` (parsed from ``raw``) nests deeper than :data:`MAX_JSON_DEPTH`,
    else "". A document with no more opening brackets than the limit is not walked (two byte
    counts); one with more is walked level by level, each container's items looked at once, in C."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
        return ""
    return TOO_DEEP if _deeper_than(value, MAX_JSON_DEPTH) else ""


def _deeper_than(value: Any, limit: int) -> bool:
    level = [value] if type(value) is list or type(value) is dict else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for container in level:
            items = container.values() if type(container) is dict else container
            kinds = set(map(type, items))
            if list in kinds or dict in kinds:
                below.extend(x for x in items if type(x) is list or type(x) is dict)
        level = below
    return False
