"""A raw HTTP exchange for tests that read status, headers and body as the server sent them."""

from __future__ import annotations

import http.client

from inferd.testing import ServerProcess


def raw_http(
    server: ServerProcess, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection: status, headers by lower-case name, body."""
    conn = http.client.HTTPConnection(server.http_url, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()
