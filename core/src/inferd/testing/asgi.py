"""A server built in this process whose HTTP app is called over ``httpx.ASGITransport``.

No socket, no subprocess, no thread: for tests of what the HTTP API answers, where the process
boundary is not what is tested (sockets, workers, signals, TLS and clients have their real-server
tests). Requests go through the ASGI app (``HttpApp`` behind the body limit), not through the
direct routes the socket server answers some infer requests with; ``test_http_app`` checks both
answer alike. Needs ``httpx``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from inferd.host.server import Server


@contextlib.asynccontextmanager
async def asgi_client(
    repositories: Sequence[Path], plugins: Iterable[Any] | None = None, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Server]]:
    """``async with asgi_client([repo], cache_config=...) as (client, server)``: the server started
    (its models loaded), its HTTP app behind ``client``; stopped on exit. ``plugins``: exactly
    these plugin objects; by default the installed plugins (entry points) as ``inferd serve`` has.
    ``options``: :class:`~inferd.host.server.ServerOptions` fields."""
    import httpx

    from inferd.frontends.http.app import HttpApp
    from inferd.host.plugins import PluginHost
    from inferd.host.server import Server, ServerOptions
    from inferd.serving import HTTP_MAX_INPUT_SIZE, BodyLimit

    opts = ServerOptions(
        [Path(r) for r in repositories], allow_http=False, allow_grpc=False, allow_metrics=False, **options
    )
    host = PluginHost() if plugins is None else PluginHost(load_entrypoints=False, plugins=plugins)
    server = Server(opts, host=host)
    await server.start()
    try:
        app = BodyLimit(HttpApp(server.dataplane), HTTP_MAX_INPUT_SIZE)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inferd") as client:
            yield client, server
    finally:
        await server.stop()
