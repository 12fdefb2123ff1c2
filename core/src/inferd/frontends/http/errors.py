"""What every HTTP route shares: the request body decoder and the error -> response table."""

from __future__ import annotations

import json
import logging
import zlib

from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument, Unsupported
from inferd.serving import TOO_LARGE

log = logging.getLogger(__name__)
_compact = json.JSONEncoder(separators=(",", ":")).encode

#: Error kind -> HTTP status, as Triton maps them (every other kind is 400); the access kinds
#: (``inferd.auth``) as Triton answers a restricted API (403) and as HTTP names the others.
STATUS = {
    ErrorKind.INTERNAL: 500,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.UNSUPPORTED: 501,
    ErrorKind.RESTRICTED: 403,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.LIMITED: 429,
}
#: The headers of an error's response, content type first: Triton answers a restricted API in
#: text/plain (its body JSON all the same); a missing key asks for a bearer key.
_HEADERS = {
    ErrorKind.RESTRICTED: [(b"content-type", b"text/plain")],
    ErrorKind.UNAUTHENTICATED: [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
}
_JSON = [(b"content-type", b"application/json")]


#: The ``Accept-Encoding`` header Triton sends with its 501 for an unsupported request encoding.
ACCEPTED_ENCODINGS = (b"accept-encoding", b"gzip, deflate")


class UnsupportedEncoding(Unsupported):
    """A request body in a ``Content-Encoding`` other than gzip, deflate or identity (501)."""


def decode_body(body: bytes, encoding: str, limit: int | None = None) -> bytes:
    """The request body as sent before its ``Content-Encoding`` (``gzip``, ``deflate``,
    ``identity`` or none; ``encoding`` lower-cased). Raises ``zlib.error`` on a corrupt body and
    :class:`UnsupportedEncoding` for any other encoding. ``limit`` (``--http-max-input-size``)
    bounds the inflated body: inflating stops past it (a small body inflating to gigabytes is
    refused, never held)."""
    if not encoding or encoding == "identity":
        return body
    if encoding == "gzip":
        return _inflate(body, 16 + zlib.MAX_WBITS, limit)
    if encoding == "deflate":
        return _inflate(body, zlib.MAX_WBITS, limit)
    raise UnsupportedEncoding(
        f"Unsupported compression type (Content-Encoding '{encoding}'; this server reads gzip, deflate "
        f"or identity request bodies)"
    )


def _inflate(body: bytes, wbits: int, limit: int | None) -> bytes:
    if limit is None:
        return zlib.decompress(body, wbits)
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit:
        raise InvalidArgument(TOO_LARGE.format(size=f" (more than {limit} bytes once inflated)", limit=limit))
    if not inflater.eof:
        raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    return out


def error_body(message: str) -> bytes:
    """Triton's error JSON: ``{"error": message}``."""
    return _compact({"error": message}).encode()


def error_headers(exc: InferdError) -> list[tuple[bytes, bytes]]:
    """The headers an error's response carries (content type first; ``Retry-After`` for a limit
    or a load on demand that did not happen in time)."""
    retry_after = getattr(exc, "retry_after", 0)  # a limit (AccessDenied), a load on demand refused
    if retry_after:
        return [*_JSON, (b"retry-after", str(retry_after).encode())]
    return _HEADERS.get(exc.kind, _JSON)


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
