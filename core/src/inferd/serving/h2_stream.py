"""The HTTP/2 short path's seam: a request answered whole, straight from its stream, without ASGI.

An app served by :class:`~inferd.serving.runner.H2Server` may give it :data:`UnaryRoute` s by the
request's raw path. For a new stream on one of those paths the protocol calls the route with the
method and headers; a :data:`UnaryHandler` it returns answers the stream through a
:class:`UnaryStream` (read the whole body, then headers, data and trailers at once); None sends the
request to the ASGI app. The app knows its protocol (gRPC's messages and statuses); the stream
knows HTTP/2 (zttp's stream API, flow control, the connection's writes).

:class:`UnaryStream` also stands in for uvicorn's request/response cycle in the protocol's
bookkeeping (it has the attributes the protocol reads and writes: ``body``, ``more_body``,
``message_event``, ``disconnected``, ``response_complete``); the protocol setting ``disconnected``
(the client reset the stream or went away) cancels the handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import zttp

Headers = list[tuple[bytes, bytes]]
#: Answers one stream through its :class:`UnaryStream`.
UnaryHandler = Callable[["UnaryStream"], Awaitable[None]]
#: A raw path's route: (method, headers with lower-case names) -> the stream's handler, or None (ASGI).
UnaryRoute = Callable[[bytes, Headers], "UnaryHandler | None"]
#: Looks at the body's parts received so far and the size before the last one; returns the size.
#: May raise to refuse the request before the rest of its body is read.
BodyCheck = Callable[[list[bytearray], int], int]


class _Flow(Protocol):
    write_paused: bool

    async def drain(self) -> None: ...


class _Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


class UnaryStream:
    """One HTTP/2 stream answered by a :data:`UnaryHandler`, run by :meth:`run` as a task."""

    def __init__(
        self,
        conn: zttp.H2Connection,
        event: zttp.Request,
        transport: _Writer,
        flow: _Flow,
        resume_reading: Callable[[], None],
    ) -> None:
        self.conn = conn
        self.stream = conn.stream(event.stream_id)
        self.transport = transport
        self.flow = flow
        self.resume_reading = resume_reading
        # What the protocol reads and writes on a cycle.
        self.body = bytearray()
        self.more_body = not event.end_stream
        self.message_event = asyncio.Event()
        self._disconnected = False
        self.response_complete = False
        #: The task running the handler, while it runs: a client that goes away cancels it.
        self._task: asyncio.Task[None] | None = None

    @property
    def disconnected(self) -> bool:
        return self._disconnected

    @disconnected.setter
    def disconnected(self, value: bool) -> None:
        """The protocol sets it when the client resets the stream or the connection goes before
        the answer: the handler, if it still runs, is cancelled (a model's request leaves its
        queue, its tenant's slot goes back at once)."""
        self._disconnected = value
        task = self._task
        if value and task is not None:
            self._task = None
            task.cancel()

    async def run(self, handler: UnaryHandler, on_done: Callable[[int], None]) -> None:
        """``handler(self)``, cancelled if the client goes away; ``on_done(stream_id)`` at the end, always."""
        try:
            self._task = asyncio.current_task()
            await handler(self)
        except asyncio.CancelledError:
            if not self._disconnected:  # else the client went away: nothing to answer
                raise
        finally:
            self._task = None
            on_done(self.stream.stream_id)

    async def read_body(self, check: BodyCheck) -> bytes | bytearray | None:
        """The whole request body, or None when the client went away first.

        What arrived is taken out of ``body`` at each wake-up and given to ``check``: the protocol
        stops reading the connection while a call holds more than its high-water mark, and resumes
        only once every call is under it (as uvicorn's own cycle does on each ``receive``).
        """
        chunks: list[bytearray] = []
        size = 0
        while self.more_body and not self._disconnected:
            if self.body:
                chunks.append(self.body)
                self.body = bytearray()
                size = check(chunks, size)
            self.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self._disconnected:
            return None
        if self.body:
            chunks.append(self.body)
            self.body = bytearray()
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def reset_unread(self) -> None:
        """After an early answer, reset the stream (NO_ERROR: the answer stands) so the client
        stops sending the rest."""
        if self.more_body and not self._disconnected and not self.transport.is_closing():
            self.stream.reset(0)
            self.transport.write(self.conn.data_to_send())

    async def answer(self, headers: Headers, data: bytes | None, trailers: Headers | None) -> None:
        """Status 200 with ``headers``, ``data`` (if any) and ``trailers`` (if any), in one write."""
        if self.flow.write_paused and not self._disconnected:
            await self.flow.drain()
        if self._disconnected or self.transport.is_closing():
            return
        stream = self.stream
        stream.send_response(200, headers)
        if data:
            stream.send_data(data)
        stream.end_message(trailers)
        self.response_complete = True
        self.message_event.set()
        self.transport.write(self.conn.data_to_send())
