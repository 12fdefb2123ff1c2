"""A minimal HTTP/1.1 client connection for the load generator: one request at a time,
keep-alive, Content-Length or chunked bodies. Callbacks, no coroutine per request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Response:
    status: int
    headers: dict[bytes, bytes]  # lower-case names
    body: bytes


#: ``finish(response, error, retryable)``: retryable when a reused connection was found closed
#: before any byte of the response came back (the server dropped an idle keep-alive connection).
Finish = Callable[[Response | None, str | None, bool], None]


class Connection(asyncio.Protocol):
    """One keep-alive connection; ``release`` gives it back to the pool after each response."""

    def __init__(self, release: Callable[[Connection], None]) -> None:
        self._release = release
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._finish: Finish | None = None
        self._status = 0
        self._headers: dict[bytes, bytes] | None = None
        self._length: int | None = None  # None: chunked or until close
        self._chunked = False
        self._served = 0
        self.closed = False
        self._keep_alive = True

    @property
    def usable(self) -> bool:
        return not self.closed and self._keep_alive and self._transport is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def request(self, wire: bytes, finish: Finish) -> None:
        self._finish = finish
        assert self._transport is not None
        self._transport.write(wire)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._finish is not None and self._parse():
            pass

    def _parse(self) -> bool:
        """Consume one response if complete; True when one was delivered."""
        buf = self._buf
        if self._headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            self._head(bytes(buf[:end]))
            del buf[: end + 4]
        if self._chunked:
            body = self._dechunk()
            if body is None:
                return False
        elif self._length is not None:
            if len(buf) < self._length:
                return False
            body = bytes(buf[: self._length])
            del buf[: self._length]
        else:
            return False  # body runs until the server closes the connection
        self._deliver(body)
        return True

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        self._status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        self._headers = headers
        self._chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        length = headers.get(b"content-length")
        self._length = int(length) if length is not None and not self._chunked else None
        if headers.get(b"connection", b"").lower() == b"close" or lines[0].startswith(b"HTTP/1.0"):
            self._keep_alive = False

    def _dechunk(self) -> bytes | None:
        """The whole body once every chunk (and the trailer) is in; None while incomplete."""
        buf, pos = self._buf, 0
        parts: list[bytes] = []
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(buf[pos:eol]).split(b";")[0] or b"0", 16)
            if size == 0:  # last chunk, optional trailer lines, blank line
                end = buf.find(b"\r\n\r\n", eol)
                if end < 0:
                    return None
                del buf[: end + 4]
                return b"".join(parts)
            if len(buf) < eol + 2 + size + 2:
                return None
            parts.append(bytes(buf[eol + 2 : eol + 2 + size]))
            pos = eol + 2 + size + 2

    def _deliver(self, body: bytes) -> None:
        finish, self._finish = self._finish, None
        response = Response(self._status, self._headers or {}, body)
        self._headers = None
        self._served += 1
        self._release(self)
        if finish is not None:
            finish(response, None, False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        finish, self._finish = self._finish, None
        if finish is None:
            return
        if self._headers is not None and self._length is None and not self._chunked:
            finish(Response(self._status, self._headers, bytes(self._buf)), None, False)
            return
        retryable = self._served > 0 and self._headers is None and not self._buf
        finish(None, f"connection closed by the server ({exc or 'EOF'})", retryable)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()
