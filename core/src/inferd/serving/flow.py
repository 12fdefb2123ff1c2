"""Flow control shared by the HTTP/1.1 and HTTP/2 protocols: a peer that does not read is not read."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

__all__ = ["HIGH_WATER_LIMIT", "ReadingFlow"]

#: A request body held past this many bytes its handler has not taken pauses reading the connection.
HIGH_WATER_LIMIT = 65536


class ReadingFlow:
    """One connection's flow control: writers wait while the transport's buffer is full, and the
    connection is not read while it is.

    While the transport's write buffer is over its high-water mark (``pause_writing``), writers
    :meth:`drain` and the connection is not read, so a client that sends requests (or HTTP/2 PINGs)
    without reading the answers cannot make the server hold more than the buffer. Reading also
    stays paused while pipelined requests wait (``pipeline``): each read may add a whole read's
    worth of requests.
    """

    __slots__ = ("_transport", "_pipeline", "_writable", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport, pipeline: Collection[object] = ()) -> None:
        self._transport = transport
        self._pipeline = pipeline
        self._writable: asyncio.Future[None] | None = None
        self.read_paused = False
        self.write_paused = False

    async def drain(self) -> None:
        """Return once the transport takes writes again (at once when it does)."""
        if self.write_paused:
            if self._writable is None:
                self._writable = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._writable)

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again, unless writes are paused or pipelined requests wait."""
        if self.read_paused and not self.write_paused and not self._pipeline:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: writers wait, reading stops."""
        self.write_paused = True
        self.pause_reading()

    def resume_writing(self) -> None:
        """The buffer drained (or the connection is gone): writers go on, reading resumes."""
        self.write_paused = False
        writable = self._writable
        if writable is not None:
            self._writable = None
            if not writable.done():
                writable.set_result(None)
        self.resume_reading()
