"""One HTTP/1.1 request served by an ASGI app: its ``receive`` and ``send`` over the connection.

:class:`AsgiCycle` is what :class:`~inferd.serving.h1.H1Protocol` runs for a request no direct route
takes. The bytes it writes for a response are those of the HTTP/1.1 servers ASGI apps are used to:
``HTTP/1.1`` status lines with the standard phrase, headers as the app gives them (names
lower-cased), ``connection: close`` added when the connection closes after the response, and
``transfer-encoding: chunked`` when the app gives no length.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from inferd.serving.direct import STATUS_LINE, Connection
from inferd.serving.flow import HIGH_WATER_LIMIT

log = logging.getLogger("inferd.serving.h1")

Message = MutableMapping[str, Any]
AsgiApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[object]
]

_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_ERROR_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]
_DISCONNECT: Message = {"type": "http.disconnect"}


class AsgiCycle:
    """One request's ASGI ``receive`` and ``send``; the protocol feeds its body as it is read."""

    __slots__ = (
        "_conn",
        "scope",
        "body",
        "more_body",
        "disconnected",
        "keep_alive",
        "response_complete",
        "_continue",
        "_news",
        "_waiter",
        "_started",
        "_chunked",
        "_left",
        "_head",
    )

    def __init__(self, conn: Connection, scope: dict[str, Any], keep_alive: bool, expect_continue: bool) -> None:
        self._conn = conn
        self.scope = scope
        self.body = bytearray()
        self.more_body = True
        self.disconnected = False
        self.keep_alive = keep_alive
        self.response_complete = False
        #: ``Expect: 100-continue``: the interim answer goes out when the app first reads the body.
        self._continue = expect_continue
        #: Something happened that ``receive`` has not said yet (body, its end, a disconnect).
        self._news = False
        self._waiter: asyncio.Future[None] | None = None
        self._started = False
        self._chunked = False
        #: Bytes of the body the response's ``content-length`` still owes.
        self._left = 0
        self._head = scope["method"] == "HEAD"

    # -- what the protocol calls ----------------------------------------------------------------

    def add_body(self, chunk: bytes) -> None:
        self.body += chunk
        if len(self.body) > HIGH_WATER_LIMIT:
            self._conn.flow.pause_reading()
        self._wake()

    def end_body(self) -> None:
        self.more_body = False
        self._wake()

    def disconnect(self) -> None:
        """The client went away: ``receive`` says so, ``send`` writes nothing."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        self._news = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def run(self, app: AsgiApp) -> None:
        """Call ``app``; a failure before the response began is answered 500, after it closes."""
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            log.error("Exception in ASGI application\n", exc_info=exc)
            if not self._started:
                await self._send_500()
            else:
                self._conn.transport.close()
            return
        if result is not None:
            log.error("ASGI callable should return None, but returned '%s'.", result)
            self._conn.transport.close()
        elif not self._started and not self.disconnected:
            log.error("ASGI callable returned without starting response.")
            await self._send_500()
        elif not self.response_complete and not self.disconnected:
            log.error("ASGI callable returned without completing response.")
            self._conn.transport.close()

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _ERROR_HEADERS})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    # -- ASGI -----------------------------------------------------------------------------------

    async def receive(self) -> Message:
        conn = self._conn
        if self._continue:
            self._continue = False
            if not conn.transport.is_closing():
                conn.transport.write(_CONTINUE)
        if not self.disconnected and not self.response_complete:
            conn.flow.resume_reading()
            if not self._news:  # after the body's end, that is a disconnect (or the response's end)
                self._waiter = conn.loop.create_future()
                await self._waiter
            self._news = False
        if self.disconnected or self.response_complete:
            return _DISCONNECT
        body = bytes(self.body)
        self.body.clear()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        conn = self._conn
        if conn.flow.write_paused and not self.disconnected:
            await conn.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self._started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message["status"], message.get("headers", ()))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")

    def _start(self, status: int, headers: Any) -> None:
        self._started = True
        self._continue = False
        head = [STATUS_LINE[status]]
        says_close = False
        framed = False
        for name, value in headers:
            if _BAD_NAME.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if _BAD_VALUE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length" and not framed:
                self._left = int(value.decode())
                framed = True
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self._left = 0
                self._chunked = framed = True
            elif name == b"connection" and b"close" in [token.lower().strip() for token in value.split(b",")]:
                self.keep_alive = False
                says_close = True
            head += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not says_close:
            head.append(b"connection: close\r\n")
        if not framed and not self._head and status not in (204, 304):
            self._chunked = True
            head.append(b"transfer-encoding: chunked\r\n")
        head.append(b"\r\n")
        self._conn.transport.write(b"".join(head))

    def _body(self, body: bytes, more_body: bool) -> None:
        transport = self._conn.transport
        if self._head:
            self._left = 0
        elif self._chunked:
            if body:
                transport.write(b"%x\r\n" % len(body))
                transport.write(body)
                transport.write(b"\r\n")
            if not more_body:
                transport.write(b"0\r\n\r\n")
        else:
            if len(body) > self._left:
                raise RuntimeError("Response content longer than Content-Length")
            self._left -= len(body)
            transport.write(body)
        if more_body:
            return
        if self._left != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        self._wake()
        if not self.keep_alive:
            transport.close()
        self._conn.on_response_complete()
