"""``POST /v2/models/{m}[/versions/{v}]/infer``: the hot path, a raw ASGI endpoint of the app.

It is a route of the one Starlette app, without Starlette's request and response objects;
``HttpApp`` dispatches to it by the route's own pattern ahead of the router. Decoding and encoding
are in ``codec``; the body decoder and the error table are the ones every route uses (``errors``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from inferd.default_plugins.http.codec import (
    HEADER_LENGTH,
    decode_request,
    encode_response,
    header_size,
    parse_json,
    split_body,
)
from inferd.default_plugins.http.compression import compress_body, response_coding
from inferd.default_plugins.http.errors import (
    ACCEPTED_ENCODINGS,
    UnsupportedEncoding,
    decode_body,
    error_body,
    error_reply,
)
from inferd.default_plugins.http.plans import HeaderPlans
from inferd.default_plugins.http.raw import decode_raw_request
from inferd.shared_memory import bind_outputs

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane
    from inferd.model_info import ModelInfo
    from inferd.types import InferRequest

_JSON = b"application/json"
_OCTETS = b"application/octet-stream"
_HEADER_LENGTH = HEADER_LENGTH.encode()
_ALLOW_POST = [(b"allow", b"POST")]
#: Binary responses up to this size go out as one body (copying a few KiB costs less than
#: another ``send`` through uvicorn and the socket); larger ones part by part, uncopied.
JOIN_LIMIT = 16 * 1024

Headers = list[tuple[bytes, bytes]]


class InferEndpoint:
    """The ASGI endpoint of both infer routes (unversioned and versioned)."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dp = dataplane
        #: Shared-memory regions inputs are read from and outputs written to.
        self.regions = dataplane.shared_memory.regions
        self.plans = HeaderPlans(regions=self.regions)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _respond(send, 405, error_body("Method Not Allowed"), _JSON, _ALLOW_POST)
            return
        params = scope["path_params"]
        try:
            parts, json_length, accept = await self._infer(scope, receive, params["model"], params.get("version", ""))
        except Exception as exc:
            status, body = error_reply(exc, scope["path"])
            extra = [ACCEPTED_ENCODINGS] if isinstance(exc, UnsupportedEncoding) else None
            await _respond(send, status, body, _JSON, extra)
            return
        coding = None if accept is None else response_coding(accept)
        if coding is not None:
            await _respond_compressed(send, parts, json_length, coding)
            return
        if json_length is None:
            await _respond(send, 200, parts[0], _JSON)
            return
        extra = [(_HEADER_LENGTH, str(json_length).encode())]
        length = 0
        for part in parts:
            length += len(part)
        if length <= JOIN_LIMIT:
            await _respond(send, 200, b"".join(parts), _OCTETS, extra)
        else:
            await _respond_parts(send, parts, length, _OCTETS, extra)

    async def _infer(
        self, scope: Scope, receive: Receive, model: str, version: str
    ) -> tuple[list[bytes | memoryview], int | None, bytes | None]:
        """Decode, run on the version resolved once, encode: the body parts, the JSON length and
        the request's ``Accept-Encoding``."""
        header_length, encoding, accept = None, "", None
        for name, value in scope["headers"]:
            if name == _HEADER_LENGTH:
                header_length = value.decode("latin-1")
            elif name == b"content-encoding":
                encoding = value.decode("latin-1").lower()
            elif name == b"accept-encoding":
                accept = value
        body = decode_body(await _read_body(receive), encoding, scope.get("inferd.max_input_size"))
        request, binary_output, info = self._decode(body, header_length, model, version)
        sinks = bind_outputs(request, self.regions) if request.outputs else None
        response = await self.dp.infer(request, info)
        if sinks is not None:
            sinks.write(response)
        parts, json_length = encode_response(response, request, binary_output)
        return parts, json_length, accept

    def _decode(
        self, body: bytes, header_length: str | None, model: str, version: str
    ) -> tuple[InferRequest, bool, ModelInfo]:
        """The request (JSON, JSON header + binary, or a raw body), its ``binary_data_output`` and
        the version it runs on."""
        size = None if header_length is None else header_size(header_length, len(body))
        if size == 0:
            info = self.dp.resolve(model, version)
            return decode_raw_request(body, info, version), True, info
        header_bytes, binary = split_body(body, size)
        if size is None:
            parsed = parse_json(header_bytes, "request")
            request, binary_output = decode_request(parsed, binary, model, version, self.regions)
        else:
            request, binary_output = self.plans.decode(header_bytes, binary, model, version)
        return request, binary_output, self.dp.resolve(model, version)


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, content_type: bytes, extra: Headers | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _respond_compressed(
    send: Send, parts: list[bytes | memoryview], json_length: int | None, coding: str
) -> None:
    """A 200 whose body is compressed as ``coding``; ``Inference-Header-Content-Length`` counts
    the uncompressed JSON header, as in Triton."""
    length = 0
    for part in parts:
        length += len(part)
    body = await compress_body(parts, length, coding)
    if json_length is None:
        extra = [(b"content-encoding", coding.encode())]
        await _respond(send, 200, body, _JSON, extra)
    else:
        extra = [(_HEADER_LENGTH, str(json_length).encode()), (b"content-encoding", coding.encode())]
        await _respond(send, 200, body, _OCTETS, extra)


async def _respond_parts(
    send: Send, parts: list[bytes | memoryview], length: int, content_type: bytes, extra: Headers
) -> None:
    """A 200 whose body (``length`` bytes) is sent part by part: tensor bytes go to the socket
    without being joined."""
    headers = [(b"content-type", content_type), (b"content-length", str(length).encode()), *extra]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    last = len(parts) - 1
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < last})
