"""An in-process server (no frontends listening) over a two-version add_sub, for tests that drive the
data plane, the HTTP application or the gRPC service directly, as their servers would drive them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from inferd.host.server import Server, ServerOptions
from inferd.testing import write_repository
from tests.e2e import models

TWO_VERSIONS = models.ADD_SUB_CONFIG + "version_policy: { all {} }\n"
A = [1.0, 2.0, 3.0, 4.0]
B = [1.0, 1.0, 1.0, 1.0]


def serve(tmp_path: Any, scenario: Callable[[Server], Awaitable[None]]) -> None:
    """Run ``scenario`` against a started in-process server serving add_sub versions 1 and 2."""
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub(versions=(1, 2), config=TWO_VERSIONS)})

    async def main() -> None:
        server = Server(ServerOptions([repo], allow_http=False, allow_grpc=False, allow_metrics=False))
        await server.start()
        try:
            await scenario(server)
        finally:
            await server.stop()

    asyncio.run(main())
