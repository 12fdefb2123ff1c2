"""``POST /v2/models/{m}[/versions/{v}]/infer`` straight from ASGI.

The infer route is the hot path: this wrapper serves it without Starlette's middleware stack,
router and request/response objects, and hands every other request to the Starlette app. The
decoding, encoding and error bodies are the same ones the Starlette routes use.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from inferd.default_plugins.http.codec import STATUS, decode_request, encode_response, parse_json, split_body
from inferd.errors import InferdError

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane

log = logging.getLogger(__name__)

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]]

_JSON = b"application/json"
_OCTETS = b"application/octet-stream"
_PREFIX = "/v2/models/"
_SUFFIX = "/infer"


def infer_target(path: str) -> tuple[str, str] | None:
    """``(model, version)`` when ``path`` is an infer route, else None."""
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], ""
    if len(parts) == 3 and parts[0] and parts[1] == "versions" and parts[2].isdigit():
        return parts[0], parts[2]
    return None


class InferFastPath:
    """ASGI wrapper: infer requests are served here, everything else by ``app``."""

    def __init__(self, app: ASGIApp, dataplane: DataPlane) -> None:
        self.app = app
        self.dp = dataplane

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            target = infer_target(scope["path"])
            if target is not None:
                if scope["method"] == "POST":
                    await self._infer(scope, receive, send, *target)
                else:
                    await _respond(send, 405, _error("Method Not Allowed"), extra=[(b"allow", b"POST")])
                return
        await self.app(scope, receive, send)

    async def _infer(self, scope: dict[str, Any], receive: Any, send: Any, model: str, version: str) -> None:
        try:
            header_length, encoding = None, None
            for name, value in scope["headers"]:
                if name == b"inference-header-content-length":
                    header_length = value.decode("latin-1")
                elif name == b"content-encoding":
                    encoding = value.decode("latin-1").lower()
            body = await _read_body(receive)
            if encoding == "gzip":
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            header_bytes, binary = split_body(body, header_length)
            request, binary_output = decode_request(parse_json(header_bytes, "request"), binary, model, version)
            response = await self.dp.infer(request)
            parts, json_length = encode_response(response, request, binary_output)
        except InferdError as exc:
            await _respond(send, STATUS.get(exc.kind, 400), _error(exc.message))
            return
        except zlib.error as exc:
            await _respond(send, 400, _error(f"failed to decompress the request body: {exc}"))
            return
        except Exception as exc:
            log.exception("unhandled error on %s", scope["path"])
            await _respond(send, 500, _error(f"internal error: {type(exc).__name__}: {exc}"))
            return
        if json_length is None:
            await _respond(send, 200, parts[0])
        else:
            extra = [(b"inference-header-content-length", str(json_length).encode())]
            await _respond_parts(send, parts, _OCTETS, extra)


async def _read_body(receive: Any) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def _error(message: str) -> bytes:
    return json.dumps({"error": message}, separators=(",", ":")).encode()


async def _respond(
    send: Any, status: int, body: bytes, content_type: bytes = _JSON, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _respond_parts(
    send: Any, parts: list[bytes | memoryview], content_type: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    """A 200 whose body is sent part by part: tensor bytes go to the socket without being joined."""
    length = sum(len(p) for p in parts)
    headers = [(b"content-type", content_type), (b"content-length", str(length).encode()), *extra]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    last = len(parts) - 1
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < last})
