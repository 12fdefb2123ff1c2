"""The frontend contract: something that serves the data plane over a protocol."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane


class Frontend(abc.ABC):
    """A protocol server (HTTP, gRPC, metrics...). Made by a factory registered through
    ``inferd_register_frontends``."""

    #: Shown in logs, e.g. "HTTP".
    name: str = ""

    @abc.abstractmethod
    async def start(self, dataplane: DataPlane) -> None:
        """Bind and start serving; return once the socket accepts connections."""

    def drain(self) -> None:
        """Readiness turned false and the server keeps serving for ``--drain-delay-secs``: answer
        as usual, but let clients know the connection is going (HTTP/1.1 ``Connection: close``)."""

    @abc.abstractmethod
    async def stop(self, grace: float) -> None:
        """Stop accepting, let in-flight calls finish for up to ``grace`` seconds, then close."""

    def address(self) -> str:
        """Where it listens, for the start-up log line."""
        return ""

    def url(self) -> str:
        """Where clients reach it, with its scheme (``https://host:port``, ``grpcs://...``), for the
        start-up summary; a plugin without one shows its :meth:`address`."""
        return self.address()
