"""The HTTP/REST frontend (KServe v2 + Triton extensions), served by hypercorn."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING

from inferd.frontend import Frontend
from inferd.hookspecs import Register, hookimpl

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane
    from inferd.server import ServerOptions

log = logging.getLogger(__name__)


class HttpFrontend(Frontend):
    """Starlette routes on a hypercorn server bound to ``host:port``."""

    name = "HTTP"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, dataplane: DataPlane) -> None:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        from inferd.default_plugins.http.app import build_app

        config = Config()
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise SystemExit(f"error: HTTP frontend cannot bind {self.host}:{self.port}: {exc.strerror}") from None
        sock.listen(2048)
        sock.set_inheritable(True)
        config.bind = [f"fd://{sock.fileno()}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.keep_alive_timeout = 75
        config.graceful_timeout = 30
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._task = asyncio.get_running_loop().create_task(
            serve(build_app(dataplane), config, shutdown_trigger=self._stop.wait),  # type: ignore[arg-type]
            name="inferd-http",
        )

    async def stop(self, grace: float) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=grace + 1)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
        self._sock.close()

    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _factory(options: ServerOptions) -> HttpFrontend | None:
    if not options.allow_http:
        return None
    return HttpFrontend(options.host, options.http_port)


@hookimpl
def inferd_register_frontends(register: Register) -> None:
    register("http", _factory)
