"""One HTTP request handed straight to an ASGI application, without a socket."""

from __future__ import annotations

import asyncio
from typing import Any


async def http_post(app: Any, path: str, body: bytes, method: str = "POST",
                    headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, bytes]:  # fmt: skip
    """The status and body of one request (any ``method``) to the ASGI application ``app``."""
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": headers or [], "scheme": "http", "server": ("test", 80),
             "asgi": {"version": "3.0"}, "http_version": "1.1"}  # fmt: skip
    sent: list[dict[str, Any]] = []
    bodies = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await asyncio.Event().wait()  # the client stays connected until the response ends
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(bytes(m.get("body", b"")) for m in sent[1:])
