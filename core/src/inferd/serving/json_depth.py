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
    else "". ``raw``'s opening brackets bound how many arrays and objects ``value`` holds: a
    document with no more than the limit is not walked at all (two byte counts), and the walk of
    one with more stops once it has met that many (a tensor's rows are found, never read)."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= MAX_JSON_DEPTH:
        return ""
    return TOO_DEEP if _deeper_than(value, MAX_JSON_DEPTH, brackets) else ""


def nested_deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` (part of a parsed document) nests more than ``levels`` arrays and objects
    deep: O(1) for a scalar, a walk of the containers otherwise."""
    return _deeper_than(value, levels, 1 << 62)


def _deeper_than(value: Any, limit: int, brackets: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels, given that it holds at most
    ``brackets`` arrays and objects (brackets inside strings make that an upper bound)."""
    if type(value) is not list and type(value) is not dict:
        return False
    level, depth, found = [value], 1, 1
    while depth <= limit:
        if found >= brackets:
            return False  # every container is known, and none lies below this level
        below: list[Any] = []
        for container in level:
            items = container.values() if type(container) is dict else container
            kinds = set(map(type, items))  # in C: one pass over a row of numbers
            if list in kinds or dict in kinds:
                below.extend(x for x in items if type(x) is list or type(x) is dict)
        if not below:
            return False
        level, depth, found = below, depth + 1, found + len(below)
    return True
