"""The HTTP/REST frontend (KServe v2 + Triton extensions)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from inferd.contracts.frontend import Frontend
from inferd.contracts.hookspecs import FrontendRegister, hookimpl
from inferd.serving import HTTP_HEADER_TIMEOUT, HTTP_MAX_HEADER_SIZE, HTTP_MAX_INPUT_SIZE, AsgiServer, BodyLimit
from inferd.serving.tls import TlsConfig

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.contracts.hookspecs import ServerSettings

log = logging.getLogger(__name__)


class HttpFrontend(Frontend):
    """The Starlette application (``app.HttpApp``) served on ``host:port``."""

    name = "HTTP"

    def __init__(
        self,
        host: str,
        port: int,
        tls: TlsConfig | None = None,
        max_input_size: int = HTTP_MAX_INPUT_SIZE,
        max_header_size: int = HTTP_MAX_HEADER_SIZE,
        header_timeout: float = HTTP_HEADER_TIMEOUT,
        forward_pattern: str | None = None,
    ) -> None:
        self.server: AsgiServer | None = None
        self.host = host
        self.port = port
        self.tls = tls
        self.max_input_size = max_input_size
        self.max_header_size = max_header_size
        self.header_timeout = header_timeout
        #: ``--http-header-forward-pattern`` (None: not forwarded).
        self.forward_pattern = forward_pattern

    async def start(self, dataplane: DataPlane) -> None:
        from inferd.frontends.http.app import HttpApp

        http_app = HttpApp(dataplane, self.forward_pattern)
        app = BodyLimit(http_app, self.max_input_size)  # --http-max-input-size
        direct = http_app.direct_routes(self.max_input_size)
        self.server = AsgiServer(
            app,
            self.host,
            self.port,
            "HTTP frontend",
            dataplane.settings.shares_ports,
            tls=self.tls,
            direct=direct,
            max_header_bytes=self.max_header_size,
            header_timeout=self.header_timeout,
        )
        await self.server.start()
        self.port = self.server.port

    def drain(self) -> None:
        if self.server is not None:
            self.server.drain()

    async def stop(self, grace: float) -> None:
        if self.server is not None:
            await self.server.stop(grace)

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.address()}"

    def status_page(self) -> str:
        return f"{self.url()}/"


def _factory(options: ServerSettings) -> HttpFrontend | None:
    if not options.allow_http:
        return None
    http = options.http
    return HttpFrontend(
        options.host,
        options.http_port,
        http.tls,
        http.max_input_size,
        http.max_header_size,
        http.header_timeout,
        http.forward_pattern,
    )


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("http", _factory)
