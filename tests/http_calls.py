"""One HTTP request from a test, where an error status is an answer to check, not an exception."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def http_call(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """The status and body of one request (urllib: a new connection each)."""
    request = urllib.request.Request(url, body, headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def json_call(
    url: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """:func:`http_call` with ``body`` sent as JSON (bytes as they are) and the answer read as
    JSON (``None`` when it is empty)."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    status, raw = http_call(url, method, data, headers, timeout, context)
    return status, json.loads(raw) if raw else None
