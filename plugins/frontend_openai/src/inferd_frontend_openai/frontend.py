"""The OpenAI frontend: :class:`~inferd_frontend_openai.app.OpenAIApp` served on its own port."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.api import HTTP_MAX_INPUT_SIZE, AsgiServer, Frontend, StartupError
from inferd_frontend_openai.metrics import LlmMetrics

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from inferd.api import DataPlane, TlsConfig
    from inferd_frontend_openai.app import OpenAIApp

log = logging.getLogger(__name__)


class OpenAIFrontend(Frontend):
    """Serves the OpenAI API on ``host:port``; ``tokenizer`` (a directory) overrides every model's,
    so do ``chat_template`` (its text) and ``tool_call_parser`` unless a model's ``model.json`` sets them.

    ``fallback``: the port is the default one (no ``--openai-port``), so the port is opened only when
    a model this API serves is loaded at start-up, and a port in use is a warning (the server runs
    without this API) rather than a failed start. ``tls`` and ``max_input_size`` are the HTTP
    port's (``--http-ssl-*``, ``--http-max-input-size``); so are the access rules
    (``dataplane.settings.access.http``: ``--auth-config`` and ``--http-restricted-api``).
    ``status_page``: serve the status page (``GET /`` and ``GET /v2/status``, as the HTTP port
    does), for a server whose HTTP port is off (``--allow-http=false``).
    ``default_max_tokens``: ``--default-max-tokens`` (None: vLLM's default, see :class:`OpenAIApp`).
    """

    name = "OpenAI"

    def __init__(
        self,
        host: str,
        port: int,
        tokenizer: Path | None = None,
        fallback: bool = False,
        tls: TlsConfig | None = None,
        max_input_size: int = HTTP_MAX_INPUT_SIZE,
        chat_template: str | None = None,
        tool_call_parser: str | None = None,
        status_page: bool = False,
        default_max_tokens: int | None = None,
    ) -> None:
        self.host = host
        self.default_max_tokens = default_max_tokens
        self.chat_template = chat_template
        self.tool_call_parser = tool_call_parser
        self.port = port
        self.tokenizer = tokenizer
        self.fallback = fallback
        self.tls = tls
        self.max_input_size = max_input_size
        self.status = status_page
        self.server: AsgiServer | None = None
        self._warming: asyncio.Future[None] | None = None
        #: Why the port is not open, for the log (once :meth:`start` decided not to open it).
        self.not_serving = ""
        #: What ``/metrics`` shows of the requests served here (see :mod:`inferd_frontend_openai.metrics`).
        self.metrics = LlmMetrics()
        #: The API once :meth:`start` serves it (the plugin's ``inferd_startup`` gives it ``/metrics``).
        self.api: OpenAIApp | None = None

    async def start(self, dataplane: DataPlane) -> None:
        from inferd_frontend_openai.catalog import Catalog, served

        if self.fallback and not any(served(mv.info) for mv in dataplane.served_models()):
            self.not_serving = "not serving: no model it serves is loaded; set --openai-port to serve it"
            log.debug(
                "OpenAI API not served: no loaded model follows its convention (decoupled, text_input and "
                "text_output BYTES) and no --openai-port was given"
            )
            return
        from inferd_frontend_openai.access import Guarded, OpenAIBodyLimit  # the app: only when it is served
        from inferd_frontend_openai.app import ROUTES, STATUS_ROUTES, OpenAIApp

        settings = dataplane.settings
        catalog = Catalog(dataplane, self.tokenizer, self.chat_template, self.tool_call_parser)
        self._warming = asyncio.ensure_future(catalog.warm())
        self.api = OpenAIApp(
            dataplane,
            catalog,
            self.metrics,
            settings.access,
            dataplane if self.status else None,
            self.default_max_tokens,
        )
        app: ASGIApp = self.api
        if settings.access is not None:  # no rules: nothing on the request path
            app = Guarded(app, settings.access.http, ROUTES + STATUS_ROUTES if self.status else ROUTES)
        app = OpenAIBodyLimit(app, self.max_input_size)
        server = AsgiServer(app, self.host, self.port, "OpenAI frontend", settings.shares_ports, self.tls)
        try:
            await server.start()
        except StartupError as exc:  # the default port in use: serve without this API
            if not self.fallback:
                raise
            log.warning("%s; serving without the OpenAI API (set --openai-port to serve it)", exc)
            self.not_serving = "not serving: port in use"
            return
        self.server = server
        self.port = server.port

    async def stop(self, grace: float) -> None:
        from inferd.api import SOURCES

        SOURCES.remove(self.metrics)  # added by the plugin's inferd_startup
        if self._warming is not None:
            self._warming.cancel()
        if self.server is not None:
            await self.server.stop(grace)

    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.server is not None else f"({self.not_serving})"

    def status_page(self) -> str:
        if self.server is None or not self.status:
            return ""
        return f"{'https' if self.tls else 'http'}://{self.address()}/"

    def serving(self) -> bool:
        return self.server is not None

    def url(self) -> str:
        if self.server is None:
            return self.address()
        return f"{'https' if self.tls else 'http'}://{self.address()}/v1"
