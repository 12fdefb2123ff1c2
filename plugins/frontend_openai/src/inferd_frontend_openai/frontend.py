"""The OpenAI frontend: :class:`~inferd_frontend_openai.app.OpenAIApp` served on its own port."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.asgi_server import AsgiServer
from inferd.frontend import Frontend
from inferd_frontend_openai.metrics import LlmMetrics

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane

log = logging.getLogger(__name__)


class OpenAIFrontend(Frontend):
    """Serves the OpenAI API on ``host:port``; ``tokenizer`` (a directory) overrides every model's.

    ``fallback``: the port is the default one, so a port in use is a warning (the server runs
    without this API) rather than a failed start.
    """

    name = "OpenAI"

    def __init__(self, host: str, port: int, tokenizer: Path | None = None, fallback: bool = False) -> None:
        self.host = host
        self.port = port
        self.tokenizer = tokenizer
        self.fallback = fallback
        self.server: AsgiServer | None = None
        #: What ``/metrics`` shows of the requests served here (see :mod:`inferd_frontend_openai.metrics`).
        self.metrics = LlmMetrics()

    async def start(self, dataplane: DataPlane) -> None:
        from inferd_frontend_openai.app import OpenAIApp
        from inferd_frontend_openai.catalog import Catalog

        app = OpenAIApp(dataplane, Catalog(dataplane.table, self.tokenizer), self.metrics)
        server = AsgiServer(app, self.host, self.port, "OpenAI frontend", dataplane.shares_ports)
        try:
            await server.start()
        except SystemExit as exc:
            if not self.fallback:
                raise
            log.warning("%s; serving without the OpenAI API (set --openai-port to serve it)", exc)
            return
        self.server = server
        self.port = server.port

    async def stop(self, grace: float) -> None:
        if self.server is not None:
            await self.server.stop(grace)

    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.server is not None else "(not serving: port in use)"
