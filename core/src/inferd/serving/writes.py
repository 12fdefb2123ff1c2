"""The write-gathering transport both of inferd's protocols write through: one send per loop turn."""

from __future__ import annotations

import asyncio
from typing import Any


class HeldWrites:
    """A connection's transport whose writes are held and sent together, in one ``writelines``.

    An ASGI response's head, and each body message, is its own ``transport.write``, which
    unheld would be one ``send`` system call each; over HTTP/2, each ASGI send (headers, body,
    trailers) is one write too. The HTTP/1.1 protocol flushes when the response is complete; a flush scheduled with
    the first held write sends whatever else (``100 Continue``, a streamed response's chunks, the
    frames of every HTTP/2 call answered in this turn) by the next turn of the loop.
    """

    __slots__ = ("_transport", "_held", "_loop")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: list[bytes | memoryview] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | memoryview) -> None:
        if not data:  # zttp's data_to_send() is often empty
            return
        held = self._held
        held.append(data)
        if len(held) == 1:
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send what is held (dropped once the connection is closing, as a closed transport would)."""
        held = self._held
        if not held:
            return
        self._held = []
        transport = self._transport
        if transport.is_closing():
            return
        if len(held) == 1:
            transport.write(held[0])
        else:
            transport.writelines(held)

    def writelines(self, data: list[bytes | memoryview]) -> None:
        """Send ``data`` now, after anything held, in one call (a whole response)."""
        held = self._held
        if held:
            self._held = []
            data = [*held, *data]
        if not self._transport.is_closing():
            self._transport.writelines(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()  # asked once or more per request: not through __getattr__

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
