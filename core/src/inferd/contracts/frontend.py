"""The frontend contract: something that serves the data plane over a protocol."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.serving.tls import TlsConfig


@dataclass(frozen=True, slots=True)
class HttpPortSettings:
    """The HTTP port's settings (``--http-*``), the same for every frontend that serves HTTP: the
    built-in one, the metrics port (its TLS) and plugins' (the OpenAI API)."""

    #: ``--http-ssl-*``: the port's certificates (None: clear text).
    tls: TlsConfig | None
    #: ``--http-max-input-size``: the largest request body, bytes.
    max_input_size: int
    #: ``--http-max-header-size``: the largest request line and headers, bytes.
    max_header_size: int
    #: ``--http-header-timeout-secs``: how long a request's head (and a stalled body) may take.
    header_timeout: float
    #: ``--http-header-forward-pattern``: headers forwarded to models as parameters (None: none).
    forward_pattern: str | None = None


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

    def status_page(self) -> str:
        """The URL of the status page it serves (``GET /``), for the start-up summary; "" for none."""
        return ""

    def serving(self) -> bool:
        """False when :meth:`start` chose not to open its port (an optional API nobody asked for):
        the host then leaves it out of the start-up and shutdown lines and the summary."""
        return True
