"""The one check of client-chosen names that may reach the file system or a registry.

Model names (and version strings, the names in a load's ``file:`` paths, shared-memory region
names and keys) are checked here by :func:`name_problem`, once, where a request touches files or
registers a name: loads, shared-memory registration, trace settings, the repository's writers.
Inference requests do not come here: an unknown name is just an unknown model to the lookup.
:func:`inside` resolves a path the server is about to write and checks it stays under its root.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Longest name in bytes (UTF-8): a file name on every common file system (Linux's NAME_MAX).
MAX_NAME_BYTES = 255
#: Separators, NUL and the other control characters (C0, DEL, C1): no name holds one.
_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f-\x9f]")


def name_problem(name: str) -> str:
    """Why ``name`` cannot be a model, file or region name ("" when it can): it is empty, ``.``
    or ``..``, holds a ``/``, ``\\``, NUL or other control character, is not valid UTF-8 text, or
    is longer than :data:`MAX_NAME_BYTES` bytes."""
    if not name:
        return "a name cannot be empty"
    if name == "." or name == "..":
        return f"'{name}' is not a name"
    bad = _FORBIDDEN.search(name)
    if bad is not None:
        char = bad.group()
        shown = {"/": "'/'", "\\": "'\\'"}.get(char, f"the control character {char!r}")
        return f"a name cannot hold {shown}"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return "a name must be valid UTF-8 text"
    if size > MAX_NAME_BYTES:
        return f"a name is at most {MAX_NAME_BYTES} bytes long, this one has {size}"
    return ""


def shown(name: str) -> str:
    """``name`` as an error message quotes it: whole, unless longer than any valid name."""
    return name if len(name) <= MAX_NAME_BYTES else f"{name[: MAX_NAME_BYTES - 3]}..."


def inside(root: Path, path: Path) -> Path:
    """``path`` resolved (symbolic links followed); ``ValueError`` when it does not lie strictly
    under ``root`` (itself resolved)."""
    base = root.resolve()
    resolved = path.resolve()
    if base not in resolved.parents:
        raise ValueError(f"'{path}' is not inside '{root}'")
    return resolved
