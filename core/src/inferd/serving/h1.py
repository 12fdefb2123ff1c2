"""inferd's HTTP/1.1 protocol: an ``asyncio.Protocol`` over httptools' request parser.

Bytes read are fed to ``httptools.HttpRequestParser``, whose callbacks build each request; when
its head is complete, a request a direct route takes becomes a
:class:`~inferd.serving.direct.DirectCycle` (no ASGI), any other an
:class:`~inferd.serving.h1_cycle.AsgiCycle`. One request runs at a time per connection: pipelined
requests wait, in order, with reading paused. What is written goes through one
:class:`~inferd.serving.writes.HeldWrites` per connection and is sent when the response completes.

Limits: a head (request line and headers) over ``max_header_bytes`` is answered 431 and the
connection closed; a head that takes longer than ``header_timeout`` to arrive (the first one counted
from the connection's opening), or a body that goes that long without a byte while the server reads
it, closes the connection; an idle keep-alive connection closes after ``keep_alive_secs``; bytes
that are not HTTP are answered 400 and the connection closed. A request that arrives in one read
(nearly all) costs two flag stores for the first two. An upgrade request (WebSocket, h2c) is
answered as plain HTTP, and its connection closed after the answer.

Graceful shutdown (:class:`~inferd.serving.runner.Runner` calls :meth:`H1Protocol.shutdown`): an
idle connection closes now; a busy one answers its request with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote

import httptools

from inferd.serving.direct import STATUS_LINE, DirectCycle, takes_directly
from inferd.serving.flow import ReadingFlow
from inferd.serving.h1_cycle import AsgiApp, AsgiCycle
from inferd.serving.writes import HeldWrites

if TYPE_CHECKING:
    from inferd.serving.direct import DirectRoutes
    from inferd.serving.runner import ServerState

log = logging.getLogger(__name__)

Cycle = AsgiCycle | DirectCycle

_IDLE, _HEAD, _BODY = 0, 1, 2
_HEAD_END = b"\r\n\r\n"
_TOO_LARGE_HEAD = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
)
_INVALID = b"Invalid HTTP request received."
_BAD_REQUEST = STATUS_LINE[
    400
] + b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
    len(_INVALID),
    _INVALID,
)


@dataclass(frozen=True)
class Served:
    """What a server's HTTP/1.1 connections serve, and their limits."""

    #: The ASGI app that answers what no direct route takes.
    app: AsgiApp
    #: The requests answered without ASGI (:mod:`inferd.serving.direct`).
    direct: DirectRoutes | None
    #: An idle keep-alive connection is closed after this long.
    keep_alive_secs: float
    #: The largest request head, in bytes (``--http-max-header-size``).
    max_header_bytes: int
    #: How long a head may take to arrive, or a body go without a byte (``--http-header-timeout-secs``).
    header_timeout: float


class H1Protocol(asyncio.Protocol):
    """One HTTP/1.1 connection (see the module's docstring); what it serves is on the class
    (:func:`protocol_class`). Built by :class:`~inferd.serving.runner.Runner` for each connection."""

    #: What the connections serve (set by :func:`protocol_class`).
    served: ClassVar[Served]
    #: Set by :meth:`AsgiServer.drain <inferd.serving.AsgiServer.drain>`: every response from now
    #: on closes its connection.
    draining: ClassVar[bool] = False

    transport: HeldWrites
    flow: ReadingFlow

    def __init__(self, server_state: ServerState, _loop: asyncio.AbstractEventLoop | None = None, **_: Any) -> None:
        self.loop = _loop or asyncio.get_running_loop()
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.parser = httptools.HttpRequestParser(self)
        # answer a request whose head says ``Connection: close`` even when bytes follow it
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        #: The newest request parsed (its body goes to it); None before the first.
        self.cycle: Cycle | None = None
        #: The request whose handler runs (None: none yet).
        self._running: Cycle | None = None
        #: Requests parsed while another runs, newest first: each starts when the one before completes.
        self.pipeline: deque[Cycle] = deque()
        self.client: tuple[str, int] | None = None
        self._server: tuple[str, int] | None = None
        self._scheme = "http"
        # the request being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_continue = False
        # the head's limits
        self._state = _IDLE
        #: When the head being read began to arrive (a head that spans reads), or the body last grew.
        self._since = 0.0
        self._head_bytes = 0
        self._read_timer: asyncio.TimerHandle | None = None
        # keep-alive: one timer while the connection lives, which closes it once idle for the timeout
        self._idle_since: float | None = None
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        #: An upgrade request was read: what follows it is not HTTP/1.1 and is not read.
        self._upgraded = False

    # -- asyncio's side -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # uvloop's is none
        self.connections.add(self)
        self.transport = HeldWrites(transport)
        self.flow = ReadingFlow(self.transport, self.pipeline)  # type: ignore[arg-type]
        self.client = _address(transport.get_extra_info("peername"))
        self._server = _address(transport.get_extra_info("sockname"))
        if transport.get_extra_info("sslcontext") is not None:
            self._scheme = "https"
        self._state = _HEAD  # the first request's head is awaited from now
        self._since = self.loop.time()
        self._read_timer = self.loop.call_later(self.served.header_timeout, self._read_check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        for cycle in (self._running, *self.pipeline, self.cycle):
            if cycle is not None and not cycle.response_complete and not cycle.disconnected:
                cycle.disconnect()
        self.flow.resume_writing()  # a response waiting to write learns the client is gone
        for timer in (self._read_timer, self._keep_alive_timer):
            if timer is not None:
                timer.cancel()
        self._read_timer = self._keep_alive_timer = None
        if exc is None:
            self.transport.close()

    def eof_received(self) -> None:
        pass  # the transport closes; connection_lost follows

    def pause_writing(self) -> None:
        self.flow.pause_writing()

    def resume_writing(self) -> None:
        self.flow.resume_writing()

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        if self._upgraded:
            return
        if self._state == _HEAD and self._head_bytes:  # a head that began in an earlier read
            end = data.find(_HEAD_END)
            self._head_bytes += len(data) if end < 0 else end + 4
            if self._head_bytes > self.served.max_header_bytes:
                self._refuse_head()
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgraded = True  # answered as plain HTTP; the connection closes after (on_headers_complete)
            return
        except httptools.HttpParserError as exc:
            log.warning("%s: invalid HTTP request received: %s", self.client, exc)
            self._state = _IDLE
            self.transport.write(_BAD_REQUEST)
            self.transport.close()
            return
        if self._state != _IDLE and not self.transport.is_closing():
            self._read_incomplete(data)

    # -- httptools' side ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._state = _HEAD
        self._url = b""
        self._headers = []
        self._expect_continue = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        value = value.rstrip(b" \t")  # llhttp keeps trailing whitespace, which RFC 9110 5.5 excludes
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._state = _BODY
        parser = self.parser
        method = parser.get_method()
        version = parser.get_http_version()
        keep_alive = version != "1.0" and parser.should_keep_alive() and not self.draining
        upgrade = parser.should_upgrade()
        url = httptools.parse_url(self._url)
        cycle: Cycle | None = None
        direct = self.served.direct
        if direct is not None and method == b"POST" and not upgrade:
            raw_path = url.path
            if b"%" not in raw_path and raw_path.isascii():  # an encoded path: ASGI decodes it
                handler = direct.handler(b"POST", raw_path.decode("ascii"))
                if handler is not None and takes_directly(self._headers, direct.max_body):
                    cycle = DirectCycle(self, handler, self._headers, keep_alive)
        if cycle is None:
            cycle = self._asgi_cycle(method, version, url, keep_alive and not upgrade)
        self._begin(cycle)

    def _asgi_cycle(self, method: bytes, version: str, url: Any, keep_alive: bool) -> AsgiCycle:
        raw_path: bytes = url.path
        path = raw_path.decode("ascii")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version,
            "server": self._server,
            "client": self.client,
            "scheme": self._scheme,
            "root_path": "",
            "headers": self._headers,
            "state": {},
            "method": method.decode("ascii"),
            "path": unquote(path) if "%" in path else path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
        }
        return AsgiCycle(self, scope, keep_alive, self._expect_continue)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.add_body(body)

    def on_message_complete(self) -> None:
        self._state = _IDLE
        self._head_bytes = 0
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.end_body()

    # -- the requests ---------------------------------------------------------------------------

    def _begin(self, cycle: Cycle) -> None:
        """Start ``cycle`` now, or after the responses before it (pipelining)."""
        existing = self.cycle
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._start(cycle)
        else:
            self.flow.pause_reading()
            self.pipeline.appendleft(cycle)

    def _start(self, cycle: Cycle) -> None:
        self._running = cycle
        task = self.loop.create_task(cycle.run(self.served.app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_response_complete(self) -> None:
        """A response was written whole: start the next pipelined request, or wait idle."""
        self.transport.flush()
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.pipeline:
            cycle = self.pipeline.pop()
            # read again once no request waits (ReadingFlow): the one started now may have body unread
            self.flow.resume_reading()
            self._start(cycle)
            return
        self._running = None
        self.flow.resume_reading()
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(self.served.keep_alive_secs, self._keep_alive_check)

    # -- limits ---------------------------------------------------------------------------------

    def _read_incomplete(self, data: bytes) -> None:
        """A read ended inside a request: count its head, watch the clock."""
        if self._state == _BODY:
            self._since = self.loop.time()
        elif not self._head_bytes:  # the head began in this read: its bytes follow the last head's end
            end = data.rfind(_HEAD_END)
            self._head_bytes = len(data) - (end + 4 if end >= 0 else 0) or 1
            if self._head_bytes > self.served.max_header_bytes:
                self._refuse_head()
                return
            self._since = self.loop.time()
        if self._read_timer is None:
            self._read_timer = self.loop.call_later(self.served.header_timeout, self._read_check)

    def _read_check(self) -> None:
        """The timer: close a connection whose head is late, or whose body stalled."""
        self._read_timer = None
        if self._state == _IDLE or self.transport.is_closing():
            return
        timeout = self.served.header_timeout
        wait = self._since + timeout - self.loop.time()
        if self._state == _BODY and self.flow.read_paused:  # the server is not reading: not late
            self._since = self.loop.time()
            wait = timeout
        if wait <= 0:
            log.debug("%s: closed a connection whose request did not arrive within %g s", self.client, timeout)
            self.transport.close()
            return
        self._read_timer = self.loop.call_later(wait, self._read_check)

    def _refuse_head(self) -> None:
        limit = self.served.max_header_bytes
        message = b"request line and headers exceed %d bytes (--http-max-header-size)" % limit
        self._state = _IDLE
        if self.cycle is None or self.cycle.response_complete:  # else an answer is still due: just close
            self.transport.write(_TOO_LARGE_HEAD % (len(message), message))
        self.transport.close()

    def _keep_alive_check(self) -> None:
        """Close the connection if idle for the whole keep-alive timeout; else look again when it could be."""
        self._keep_alive_timer = None
        if self.transport.is_closing():
            return
        idle_since = self._idle_since
        wait = self.served.keep_alive_secs  # busy with a request: look again a whole timeout later
        if idle_since is not None:
            wait -= self.loop.time() - idle_since
            if wait <= 0:
                self.transport.close()
                return
        self._keep_alive_timer = self.loop.call_later(wait, self._keep_alive_check)

    # -- closing --------------------------------------------------------------------------------

    def drain(self) -> None:
        """Readiness turned false: the request in flight, and any queued, close the connection."""
        for cycle in (self._running, *self.pipeline, self.cycle):
            if cycle is not None:
                cycle.keep_alive = False

    def shutdown(self) -> None:
        """Graceful shutdown: close now when idle; else the request in flight closes the connection."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False


def _address(name: Any) -> tuple[str, int] | None:
    """A socket's (host, port), as ASGI's ``client`` and ``server`` (None: not an IP socket)."""
    if isinstance(name, tuple | list) and len(name) >= 2:
        return str(name[0]), int(name[1])
    return None


def protocol_class(served: Served) -> type[H1Protocol]:
    """:class:`H1Protocol` serving ``served`` (a class of its own: :attr:`H1Protocol.draining` is per server)."""
    return type("H1Protocol", (H1Protocol,), {"served": served})
