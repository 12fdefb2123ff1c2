"""An HTTP/2 stream's call: answered whole without ASGI (:class:`UnaryStream`), or by an ASGI app
(:class:`AsgiStream`).

An app served by :class:`~inferd.serving.runner.H2Server` may give it :data:`UnaryRoute` s by the
request's raw path. For a new stream on one of those paths the protocol calls the route with the
method and headers; a :data:`UnaryHandler` it returns answers the stream through a
:class:`UnaryStream` (read the whole body, then headers, data and trailers at once); None sends the
request to the ASGI app. The app knows its protocol (gRPC's messages and statuses); the stream
knows HTTP/2 (zttp's stream API, flow control, the connection's writes).

Both have what the protocol (:mod:`inferd.serving.h2`) reads and writes on a stream: ``take``
(body bytes read) and ``held`` (how many its call has not taken yet), ``more_body``,
``message_event``, ``disconnected``, ``response_complete``; on a
:class:`UnaryStream` the protocol setting ``disconnected`` (the client reset the stream or went
away) cancels the handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from inferd.serving.flow import HIGH_WATER_LIMIT
from inferd.serving.h2_receive import POOLED_FROM

if TYPE_CHECKING:
    import zttp

    from inferd.serving.h2_receive import BodyBuffers
    from inferd.serving.h2_send import Body, DataSender

Headers = list[tuple[bytes, bytes]]
#: Answers one stream through its :class:`UnaryStream`.
UnaryHandler = Callable[["UnaryStream"], Awaitable[None]]
#: A raw path's route: (method, headers with lower-case names) -> the stream's handler, or None (ASGI).
UnaryRoute = Callable[[bytes, Headers], "UnaryHandler | None"]
#: Looks at the body's parts received so far (those not yet copied into the body's buffer) and
#: the body's size so far; may raise to refuse the request before the rest of its body is read.
#: Returns the body's whole size once it knows it (a gRPC message's length prefix), else None.
BodyCheck = Callable[[list["Body"], int], "int | None"]
AsgiMessage = MutableMapping[str, Any]
#: An ASGI 3 app: (scope, receive, send).
AsgiApp = Callable[
    [AsgiMessage, Callable[[], Awaitable[AsgiMessage]], Callable[[AsgiMessage], Awaitable[None]]], Awaitable[None]
]

#: Headers RFC 9113 8.2.2 forbids in HTTP/2 (zttp refuses to send them): dropped from an ASGI answer.
FORBIDDEN_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"})
#: Body bytes a unary stream may hold before the connection stops being read: its call takes the whole
#: body anyway (up to the max message size), so pausing every 64 KiB only paced large requests.
UNARY_HIGH_WATER = 4 << 20
_INTERNAL_ERROR = [(b"content-type", b"text/plain; charset=utf-8")]

log = logging.getLogger(__name__)


class _Flow(Protocol):
    write_paused: bool

    async def drain(self) -> None: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


class _Stream:
    """What the protocol keeps of every stream it hands to inferd: the connection, the stream, where
    to write (headers and trailers through zttp, body bytes through the connection's
    :class:`~inferd.serving.h2_send.DataSender`), and the request body read so far
    (``message_event`` is set when more arrived)."""

    def __init__(
        self,
        conn: zttp.H2Connection,
        event: zttp.Request,
        transport: _Writer,
        flow: _Flow,
        resume_reading: Callable[[], None],
        sender: DataSender,
    ) -> None:
        self.conn = conn
        self.stream = conn.stream(event.stream_id)
        self.stream_id = event.stream_id
        self.transport = transport
        self.flow = flow
        self.resume_reading = resume_reading
        self.sender = sender
        # What the protocol reads and writes on a cycle.
        self.more_body = not event.end_stream
        self.message_event = asyncio.Event()
        self._waiter: asyncio.Future[None] | None = None

    def take(self, data: Body) -> int:
        """Body bytes the protocol read for this stream; returns the bytes now held for the call."""
        raise NotImplementedError

    @property
    def pending_bytes(self) -> int:
        """Body bytes of the answer waiting for the client's flow-control window."""
        return self.sender.pending(self.stream_id)

    disconnected: bool

    async def _end(self, trailers: Headers | None) -> None:
        """End the answer (``trailers``, if any) once its body went out: waits while the client's
        window holds some of it back, and ends nothing if the stream goes meanwhile."""
        if self.sender.pending(self.stream_id):
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            self.sender.after(self.stream_id, lambda: _wake(waiter))
            try:
                await waiter
            finally:
                self._waiter = None
            if self.disconnected:
                return
        self.sender.close(self.stream_id)
        if not self.transport.is_closing():
            self.stream.end_message(trailers)
            self.transport.write(self.conn.data_to_send())

    def _gone(self) -> None:
        """The stream was reset or the connection lost: a wait in :meth:`_end` ends."""
        self.sender.close(self.stream_id)
        if self._waiter is not None:
            _wake(self._waiter)


class UnaryStream(_Stream):
    """One HTTP/2 stream answered by a :data:`UnaryHandler`, run by :meth:`run` as a task."""

    def __init__(
        self,
        conn: zttp.H2Connection,
        event: zttp.Request,
        transport: _Writer,
        flow: _Flow,
        resume_reading: Callable[[], None],
        sender: DataSender,
        buffers: BodyBuffers | None = None,
    ) -> None:
        super().__init__(conn, event, transport, flow, resume_reading, sender)
        self._buffers = buffers
        self.high_water = UNARY_HIGH_WATER
        #: The body's parts as zttp read them (kept, not copied), until :meth:`read_body` takes them;
        #: an int: that many bytes the protocol read straight into :attr:`target`.
        self._parts: list[Body | int] = []
        self.held = 0
        self._direct = 0
        #: The large body's buffer once :meth:`read_body` knows the body's size (the protocol then
        #: reads DATA payloads straight into it: :meth:`direct_view`), and that size.
        self.target: memoryview | None = None
        self._expected = 0
        #: Body bytes received so far.
        self.received = 0
        self._disconnected = False
        self.response_complete = False
        #: The task running the handler, while it runs: a client that goes away cancels it.
        self._task: asyncio.Task[None] | None = None

    def take(self, data: Body) -> int:
        self._parts.append(data)
        size = len(data)
        self.held += size
        self.received += size
        self.message_event.set()
        return self.held

    def direct_view(self, most: int) -> memoryview | None:
        """Where the body's next bytes (at most ``most``) go in :attr:`target`; None: no target, or it is full."""
        target = self.target
        room = self._expected - self.received
        if target is None or room <= 0:
            return None
        at = self.received
        return target[at : at + min(most, room)]

    def took_direct(self, size: int) -> None:
        """The protocol read ``size`` body bytes into :meth:`direct_view`'s view."""
        self._parts.append(size)
        self._direct += size
        self.received += size
        self.message_event.set()

    @property
    def disconnected(self) -> bool:
        return self._disconnected

    @disconnected.setter
    def disconnected(self, value: bool) -> None:
        """The protocol sets it when the client resets the stream or the connection goes before
        the answer: the handler, if it still runs, is cancelled (a model's request leaves its
        queue, its tenant's slot goes back at once)."""
        self._disconnected = value
        if value:
            self._gone()
        task = self._task
        if value and task is not None:
            self._task = None
            task.cancel()

    async def run(self, handler: UnaryHandler, on_done: Callable[[int], None], loop: asyncio.AbstractEventLoop) -> None:
        """``handler(self)``, cancelled if the client goes away; ``on_done(stream_id)`` at the end, always.
        ``loop``: the one this runs on (asked for, Python 3.11 makes a getpid system call)."""
        try:
            self._task = asyncio.current_task(loop)
            await handler(self)
        except asyncio.CancelledError:
            if not self._disconnected:  # else the client went away: nothing to answer
                raise
        finally:
            self._task = None
            on_done(self.stream.stream_id)

    async def read_body(self, check: BodyCheck) -> Body | None:
        """The whole request body, or None when the client went away first.

        What arrived is taken at each wake-up and given to ``check``: the protocol stops reading the
        connection while a call holds more than its high-water mark, and resumes only once every
        call is under it (as the HTTP/1.1 ASGI cycle does on each ``receive``). A large body
        (``check`` says its size, from :data:`~inferd.serving.h2_receive.POOLED_FROM` bytes on) goes
        into one of the server's reused buffers (:class:`~inferd.serving.h2_receive.BodyBuffers`),
        :attr:`target`: what arrived before it existed is copied in part by part as it arrives (so
        the connection's read arena is free again at once), and from then on the protocol reads
        the DATA payloads straight into it (:meth:`direct_view`), uncopied; any other body is
        copied once, at the end. The body never is a view of the read arena (a request that kept
        it would keep the arena). ``check`` is called until it gives the size.
        """
        chunks: list[Body | int] = []
        size = 0
        target: memoryview | None = None  # the large body's buffer, while its parts fit it
        filled = 0
        expected: int | None = None
        while self.more_body and not self._disconnected:
            if self._parts:
                chunks += self._parts
                size += self.held + self._direct
                self._parts, self.held, self._direct = [], 0, 0
                if expected is None:
                    expected = check(chunks, size)  # type: ignore[arg-type]  # no int before a target
                    if expected is not None and expected >= POOLED_FROM and self._buffers is not None:
                        target = self._buffers.take(expected)
                        self.target, self._expected = target, expected
                if target is not None:
                    target, filled, chunks = _fill(target, filled, chunks, size, expected)
                    self.target = target
            self.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self._disconnected:
            return None
        chunks += self._parts
        size += self.held + self._direct
        self._parts, self.held, self._direct = [], 0, 0
        self.target = None
        # The body's last bytes may have paused reading (over the high-water mark): read again,
        # or the client's WINDOW_UPDATEs for the answer would go unread.
        self.resume_reading()
        if target is not None:
            target, filled, chunks = _fill(target, filled, chunks, size, expected)
            if target is not None:  # every part copied (a body cut short is the caller's to refuse)
                return target[:filled].toreadonly()
        parts: list[Body] = chunks  # type: ignore[assignment]  # no int without a target
        if len(parts) == 1:
            chunk = parts[0]
            return bytes(chunk) if type(chunk) is memoryview else chunk  # not a view of the read arena
        if self._buffers is not None and size >= POOLED_FROM:
            return self._buffers.join(parts, size)
        return b"".join(parts)

    def reset_unread(self) -> None:
        """After an early answer, reset the stream (NO_ERROR: the answer stands) so the client
        stops sending the rest."""
        if self.more_body and not self._disconnected and not self.transport.is_closing():
            self.stream.reset(0)
            self.transport.write(self.conn.data_to_send())

    async def answer(self, headers: Headers, body: Sequence[Body], trailers: Headers | None) -> None:
        """Status 200 with ``headers``, the ``body`` parts (none: no body) and ``trailers`` (if any),
        written in the same loop turn unless the client's flow-control window holds the body back
        (then this waits until it went out)."""
        if self.flow.write_paused and not self._disconnected:
            await self.flow.drain()
        if self._disconnected or self.transport.is_closing():
            return
        self.stream.send_response(200, headers)
        self.transport.write(self.conn.data_to_send())
        if body:
            self.sender.send(self.stream_id, body)
        if self.sender.pending(self.stream_id):  # the client's window holds some of it back
            await self._end(trailers)
        else:
            self.sender.close(self.stream_id)
            self.stream.end_message(trailers)
            self.transport.write(self.conn.data_to_send())
        self.response_complete = True
        self.message_event.set()


class AsgiStream(_Stream):
    """One HTTP/2 stream answered by an ASGI app (HTTP response trailers included), run by :meth:`run`.

    ``pending_bytes`` (the answer's bytes waiting for the client's window), ``disconnected`` and
    :meth:`abort_stream` are what the gRPC app's streaming reply looks at (``send.__self__``).
    """

    def __init__(
        self,
        scope: AsgiMessage,
        conn: zttp.H2Connection,
        event: zttp.Request,
        transport: _Writer,
        flow: _Flow,
        resume_reading: Callable[[], None],
        sender: DataSender,
    ) -> None:
        super().__init__(conn, event, transport, flow, resume_reading, sender)
        self.high_water = HIGH_WATER_LIMIT
        self.scope = scope
        self.body = bytearray()
        if not self.more_body:
            self.message_event.set()
        self._disconnected = False
        self.response_started = False
        self.response_complete = False
        self._body_complete = False
        self._trailers_expected = False
        self._trailers: Headers = []
        #: Trailers are sent only to a client that said it takes them (``te: trailers``).
        self._send_trailers = any(
            name == b"te" and value.lower().strip() == b"trailers" for name, value in scope["headers"]
        )
        self._on_done: Callable[[int], None] = _nothing

    def take(self, data: Body) -> int:
        self.body += data
        self.message_event.set()
        return len(self.body)

    @property
    def held(self) -> int:
        return len(self.body)

    @property
    def disconnected(self) -> bool:
        return self._disconnected

    @disconnected.setter
    def disconnected(self, value: bool) -> None:
        """Set by the protocol when the client resets the stream or goes away."""
        self._disconnected = value
        if value:
            self._gone()

    async def run(self, app: AsgiApp, on_done: Callable[[int], None]) -> None:
        """``app`` on this stream; an app that fails or ends without an answer gets a 500 or a reset;
        ``on_done(stream_id)`` once the answer is complete, or at the end, whichever comes first."""
        self._on_done = on_done
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            log.error("Exception in ASGI application", exc_info=exc)
            if not self.response_started:
                await self._internal_error()
            else:
                self.abort_stream()
            if not isinstance(exc, Exception):
                raise
        else:
            if not self.response_started and not self.disconnected:
                log.error("ASGI callable returned without starting response.")
                await self._internal_error()
            elif not self.response_complete and not self.disconnected:
                log.error("ASGI callable returned without completing response.")
                self.abort_stream()
        finally:
            self._done()

    def _done(self) -> None:
        on_done, self._on_done = self._on_done, _nothing
        on_done(self.stream.stream_id)

    async def _internal_error(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _INTERNAL_ERROR})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error", "more_body": False})

    def abort_stream(self) -> None:
        """Reset this stream; the connection's other streams go on."""
        if self.transport.is_closing():
            return
        self.sender.close(self.stream_id)
        self.stream.reset()
        self.transport.write(self.conn.data_to_send())
        self.disconnected = True

    async def receive(self) -> AsgiMessage:
        if not self.disconnected and not self.response_complete:
            self.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = self.body, bytearray()
        if not self.more_body:  # its last bytes may have paused reading: read again (WINDOW_UPDATEs)
            self.resume_reading()
        return {"type": "http.request", "body": bytes(body), "more_body": self.more_body}

    async def send(self, message: AsgiMessage) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        stream = self.stream
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self.response_started = True
            self._trailers_expected = message.get("trailers", False)
            stream.send_response(message["status"], _allowed(message.get("headers", ())))
        elif not self._body_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            body = message.get("body", b"")
            if body:
                self.sender.send(self.stream_id, (body,))
            if not message.get("more_body", False):
                self._body_complete = True
                if not self._trailers_expected:
                    await self._end(None)
                    self.response_complete = True
        elif not self.response_complete:
            if kind != "http.response.trailers":
                raise RuntimeError(f"Expected ASGI message 'http.response.trailers', but got '{kind}'.")
            for name, value in message["headers"]:
                name = name.lower()
                if name.startswith(b":"):
                    raise RuntimeError("Pseudo headers are not allowed in HTTP response trailers")
                if self._send_trailers and name not in FORBIDDEN_HEADERS and name != b"te":
                    self._trailers.append((name, value))
            if not message.get("more_trailers", False):
                await self._end(self._trailers or None)
                self.response_complete = True
        else:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
        self.transport.write(self.conn.data_to_send())
        if self.response_complete:
            self.message_event.set()
            self._done()


def _fill(
    target: memoryview, filled: int, chunks: list[Body | int], size: int, expected: int | None
) -> tuple[memoryview | None, int, list[Body | int]]:
    """Copy ``chunks`` into ``target`` after its first ``filled`` bytes (an int: that many bytes
    the protocol read into it already), up to the ``expected`` size; a body that outgrows it
    (``size`` bytes so far) keeps what is in the target as its first part (None: no target any
    more) and is joined at the end (the protocol reads no more than ``expected`` into it)."""
    limit = size if expected is None else min(size, expected)
    rest: list[Body | int] = []
    for index, part in enumerate(chunks):
        if isinstance(part, int):
            filled += part
            continue
        end = filled + len(part)
        if end > limit:  # past the expected size: what is left is joined at the end
            keep = limit - filled
            if keep > 0:
                target[filled:limit] = memoryview(part)[:keep]
                filled = limit
            rest = [memoryview(part)[keep:] if keep > 0 else part, *chunks[index + 1 :]]
            break
        target[filled:end] = part
        filled = end
    if expected is None or size > expected:
        return None, filled, [target[:filled], *rest] if filled else rest
    return target, filled, []


def _allowed(headers: Any) -> Headers:
    """An ASGI answer's headers, lower-cased, without those HTTP/2 forbids (``te`` only as ``trailers``)."""
    allowed = []
    for name, value in headers:
        name = name.lower()
        if name in FORBIDDEN_HEADERS or (name == b"te" and value.lower().strip() != b"trailers"):
            continue
        allowed.append((name, value))
    return allowed


def _nothing(_stream_id: int) -> None:
    pass


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
