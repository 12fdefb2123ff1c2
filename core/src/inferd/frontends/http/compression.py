"""Compressed infer responses: ``Accept-Encoding`` read as Triton reads it, and the compressor.

Triton compresses a successful infer response (the JSON header and any binary tensors after it,
``Inference-Header-Content-Length`` still counting the uncompressed header) when the request's
``Accept-Encoding`` prefers ``gzip`` or ``deflate``; errors and the other routes answer
uncompressed. :func:`response_coding` picks the coding as Triton does: comma-separated entries,
``;q=`` weights (1 when absent), the first of ``gzip`` / ``deflate`` / ``identity`` with the
highest weight above 0, names as written (lower case).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence

#: Bodies larger than this are compressed off the event loop (zlib releases the GIL).
THREAD_LIMIT = 256 * 1024
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_known: dict[bytes, str | None] = {}


def response_coding(accept_encoding: bytes) -> str | None:
    """``"gzip"``, ``"deflate"`` or None (identity) for an ``Accept-Encoding`` value."""
    coding = _known.get(accept_encoding, "")
    if coding != "":
        return coding
    coding = _negotiate(accept_encoding.decode("latin-1"))
    if len(_known) >= 64:
        _known.clear()
    _known[accept_encoding] = coding
    return coding


def _negotiate(value: str) -> str | None:
    best, weight = "identity", 0.0
    for entry in value.split(","):
        name, weighted, q = entry.lstrip(" ").partition(";q=")
        if not name:
            continue
        try:
            entry_weight = float(q) if weighted else 1.0
        except ValueError:
            continue
        if name in ("identity", "deflate", "gzip") and entry_weight > weight:
            best, weight = name, entry_weight
    return None if best == "identity" else best


def compress(parts: Sequence[bytes | memoryview], coding: str) -> bytes:
    """``parts`` joined and compressed as ``coding`` (``gzip`` or ``deflate``: zlib's format)."""
    compressor = zlib.compressobj(wbits=_WBITS[coding])
    chunks = [compressor.compress(part) for part in parts]
    chunks.append(compressor.flush())
    return b"".join(chunks)


async def compress_body(parts: Sequence[bytes | memoryview], length: int, coding: str) -> bytes:
    """:func:`compress`, in a worker thread when the body is large."""
    if length > THREAD_LIMIT:
        return await asyncio.to_thread(compress, parts, coding)
    return compress(parts, coding)
