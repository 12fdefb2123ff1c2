"""Flow control shared by the HTTP/1.1 and HTTP/2 protocols: a peer that does not read is not read.

Imported by the protocols when a server starts (it imports uvicorn; the facade does not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl

__all__ = ["HIGH_WATER_LIMIT", "ReadingFlow"]


class ReadingFlow(FlowControl):
    """uvicorn's flow control, which also stops reading a peer that does not read what it is sent.

    While the transport's write buffer is over its high-water mark (``pause_writing``), the
    connection is not read, so a client that sends requests (or HTTP/2 PINGs) without reading
    the answers cannot make the server hold more than the buffer. Reading also stays paused while
    pipelined requests wait (``pipeline``): each read may add a whole read's worth of requests.
    """

    def __init__(self, transport: asyncio.Transport, pipeline: Collection[object] = ()) -> None:
        super().__init__(transport)
        self._pipeline = pipeline

    def resume_reading(self) -> None:
        if self.read_paused and not self.write_paused and not self._pipeline:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        super().pause_writing()
        self.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.resume_reading()
