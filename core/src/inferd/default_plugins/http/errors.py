"""What every HTTP route shares: the request body decoder and the error -> response table."""

from __future__ import annotations

import json
import logging
import zlib

from inferd.errors import ErrorKind, InferdError, Unsupported

log = logging.getLogger(__name__)
_compact = json.JSONEncoder(separators=(",", ":")).encode

#: Error kind -> HTTP status, as Triton maps them (every other kind is 400).
STATUS = {
    ErrorKind.INTERNAL: 500,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNSUPPORTED: 501,
}


#: The ``Accept-Encoding`` header Triton sends with its 501 for an unsupported request encoding.
ACCEPTED_ENCODINGS = (b"accept-encoding", b"gzip, deflate")


class UnsupportedEncoding(Unsupported):
    """A request body in a ``Content-Encoding`` other than gzip, deflate or identity (501)."""


def decode_body(body: bytes, encoding: str) -> bytes:
    """The request body as sent before its ``Content-Encoding`` (``gzip``, ``deflate``,
    ``identity`` or none; ``encoding`` lower-cased). Raises ``zlib.error`` on a corrupt body and
    :class:`UnsupportedEncoding` for any other encoding."""
    if not encoding or encoding == "identity":
        return body
    if encoding == "gzip":
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise UnsupportedEncoding(
        f"Unsupported compression type (Content-Encoding '{encoding}'; this server reads gzip, deflate "
        f"or identity request bodies)"
    )


def error_body(message: str) -> bytes:
    """Triton's error JSON: ``{"error": message}``."""
    return _compact({"error": message}).encode()


def error_reply(exc: Exception, path: str) -> tuple[int, bytes]:
    """Status and body for an error raised while serving ``path``: an InferdError by its kind, a
    corrupt compressed body 400, anything else 500 (logged with its traceback: call it from the
    ``except`` block)."""
    if isinstance(exc, InferdError):
        return STATUS.get(exc.kind, 400), error_body(exc.message)
    if isinstance(exc, zlib.error):
        return 400, error_body(f"failed to decompress the request body: {exc}")
    log.exception("unhandled error on %s", path)
    return 500, error_body(f"internal error: {type(exc).__name__}: {exc}")
