"""gRPC over HTTP/2, the wire details: length-prefixed messages, ``grpc-timeout``, ``grpc-message``.

See https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md.
"""

from __future__ import annotations

import zlib

import grpc

PREFIX_BYTES = 5
#: ``grpc-encoding`` values a request may use, and the zlib window bits that decode each.
ENCODINGS = {"identity": 0, "gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
#: ``grpc-accept-encoding``: what this server decodes (it answers uncompressed).
ACCEPT_ENCODING = b"identity,deflate,gzip"
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
#: Bytes ``grpc-message`` may carry as they are (RFC 3986 unreserved-ish: printable ASCII but '%').
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}


class GrpcFailure(Exception):
    """A call that ends with ``status`` and ``message`` (in the trailers, with ``trailers`` after them)."""

    def __init__(self, status: grpc.StatusCode, message: str, trailers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.trailers = trailers or []


def error_trailers(exc: BaseException) -> list[tuple[str, str]]:
    """The trailing metadata an error adds to its status: ``retry-after`` (seconds) for a refusal the
    client may retry later (a load on demand not done in time, a limit), as HTTP's ``Retry-After``."""
    retry_after = getattr(exc, "retry_after", 0)
    return [("retry-after", str(retry_after))] if retry_after else []


def status_number(status: grpc.StatusCode) -> int:
    return int(status.value[0])


def prefix(size: int) -> bytes:
    """The length prefix of an uncompressed message of ``size`` bytes."""
    return b"\0" + size.to_bytes(4, "big")


def frame(parts: list[bytes | memoryview], size: int) -> bytes:
    """One uncompressed length-prefixed message made of ``parts`` (``size`` bytes in all)."""
    return b"".join([prefix(size), *parts])


def percent_encode(message: str) -> bytes:
    """``grpc-message``: UTF-8, every byte outside printable ASCII (and '%') as %XX."""
    data = message.encode("utf-8", "replace")
    if all(b in _PLAIN for b in data):
        return data
    return b"".join(bytes((b,)) if b in _PLAIN else b"%%%02X" % b for b in data)


def parse_timeout(value: str) -> float:
    """``grpc-timeout`` (1 to 8 digits and a unit) in seconds."""
    digits, unit = value[:-1], value[-1:]
    if not (1 <= len(digits) <= 8 and digits.isdigit() and unit in _TIMEOUT_UNITS):
        raise GrpcFailure(grpc.StatusCode.INTERNAL, f"malformed grpc-timeout header: {value!r}")
    return int(digits) * _TIMEOUT_UNITS[unit]


def check_encoding(encoding: str) -> None:
    """Refuse a ``grpc-encoding`` this server cannot decode, as grpcio does (UNIMPLEMENTED)."""
    if encoding not in ENCODINGS:
        raise GrpcFailure(
            grpc.StatusCode.UNIMPLEMENTED,
            f"grpc-encoding '{encoding}' is not supported: this server decodes {ACCEPT_ENCODING.decode()}",
        )


class MessageReader:
    """Cuts length-prefixed messages out of body chunks as they arrive; decompresses the ones
    flagged compressed with the call's ``grpc-encoding``."""

    def __init__(self, max_bytes: int, encoding: str = "identity") -> None:
        self.max_bytes = max_bytes
        self._wbits = ENCODINGS[encoding]
        self._buffer = bytearray()
        self._need = 0  # length of the message being read; 0 while its prefix is incomplete

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[memoryview]:
        """The messages completed by ``chunk``; a bad prefix raises :class:`GrpcFailure`."""
        buffer = self._buffer
        if not buffer and len(chunk) >= PREFIX_BYTES:
            out, rest = self._whole(chunk)
            if not rest:
                return out
            buffer += rest
            return out + self._drain()
        buffer += chunk
        return self._drain()

    def _whole(self, chunk: bytes | bytearray | memoryview) -> tuple[list[memoryview], memoryview]:
        """Messages entirely inside ``chunk`` (no copy), and what is left of it."""
        view = memoryview(chunk)
        out: list[memoryview] = []
        pos, end = 0, len(chunk)
        while end - pos >= PREFIX_BYTES:
            length = self._length(view[pos : pos + PREFIX_BYTES])
            if end - pos - PREFIX_BYTES < length:
                break
            out.append(self._open(view[pos], view[pos + PREFIX_BYTES : pos + PREFIX_BYTES + length]))
            pos += PREFIX_BYTES + length
        return out, view[pos:]

    def _drain(self) -> list[memoryview]:
        buffer = self._buffer
        out: list[memoryview] = []
        while True:
            if not self._need:
                if len(buffer) < PREFIX_BYTES:
                    return out
                self._need = self._length(memoryview(buffer)[:PREFIX_BYTES]) + PREFIX_BYTES
            if len(buffer) < self._need:
                return out
            flag = buffer[0]
            if len(buffer) == self._need:  # the usual case: hand the buffer over, no copy
                message = memoryview(buffer).toreadonly()[PREFIX_BYTES:]
                self._buffer = buffer = bytearray()
                self._need = 0
                out.append(self._open(flag, message))
                return out
            copied = bytes(memoryview(buffer)[PREFIX_BYTES : self._need])
            del buffer[: self._need]
            self._need = 0
            out.append(self._open(flag, memoryview(copied)))

    def _open(self, flag: int, message: memoryview) -> memoryview:
        """The message as sent before compression (``flag`` 1), bounded by ``max_bytes``."""
        if not flag:
            return message
        inflate = zlib.decompressobj(self._wbits)
        try:
            data = inflate.decompress(message, self.max_bytes + 1)
        except zlib.error as exc:
            raise GrpcFailure(grpc.StatusCode.INTERNAL, f"failed to decompress the request message: {exc}") from None
        if len(data) > self.max_bytes:
            raise GrpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max (> {self.max_bytes} decompressed)",
            )
        return memoryview(data)

    def _length(self, prefix: memoryview) -> int:
        if prefix[0] > 1:
            raise GrpcFailure(grpc.StatusCode.INTERNAL, f"malformed gRPC frame: compressed flag {prefix[0]}")
        if prefix[0] == 1 and not self._wbits:
            raise GrpcFailure(
                grpc.StatusCode.UNIMPLEMENTED, "compressed messages are not supported without a grpc-encoding"
            )
        length = int.from_bytes(prefix[1:5], "big")
        if length > self.max_bytes:
            raise GrpcFailure(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"Received message larger than max ({length} vs. {self.max_bytes})"
            )
        return length

    def finish(self) -> None:
        """The body ended: a message cut short is an error."""
        if self._buffer:
            have = len(self._buffer)
            need = max(self._need, PREFIX_BYTES)
            raise GrpcFailure(
                grpc.StatusCode.INTERNAL, f"truncated gRPC message: the request ended after {have} of {need} bytes"
            )
