"""``POST /v2/models/{m}[/versions/{v}]/infer``: the hot path, a raw ASGI endpoint of the app.

It is a route of the one Starlette app, without Starlette's request and response objects;
``HttpApp`` dispatches to it by the route's own pattern ahead of the router. Decoding and encoding
are in ``codec``; the body decoder and the error table are the ones every route uses (``errors``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from inferd.frontends.http.codec import (
    HEADER_LENGTH,
    decode_request,
    encode_response,
    header_size,
    parse_json,
    split_body,
)
from inferd.frontends.http.compression import compress_body, response_coding
from inferd.frontends.http.errors import (
    ACCEPTED_ENCODINGS,
    UnsupportedEncoding,
    decode_body,
    error_body,
    error_reply,
)
from inferd.frontends.http.plans import HeaderPlans
from inferd.frontends.http.raw import decode_raw_request
from inferd.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, report
from inferd.frontends.reply_headers import reply_headers
from inferd.serving import Headers, Reply
from inferd.shared_memory import bind_outputs

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.contracts.model_info import ModelInfo
    from inferd.contracts.types import InferRequest
    from inferd.frontends.header_forward import HeaderForward

_JSON = b"application/json"
_OCTETS = b"application/octet-stream"
_HEADER_LENGTH = HEADER_LENGTH.encode()
_ALLOW_POST = [(b"allow", b"POST")]
_LOAD_FORMAT, _LOAD_REPORT = FORMAT_HEADER.encode(), REPORT_HEADER.encode()
#: Binary responses up to this size go out as one body (copying a few KiB costs less than
#: another ``send`` through the HTTP/1.1 protocol and the socket); larger ones part by part, uncopied.
JOIN_LIMIT = 16 * 1024


class InferEndpoint:
    """Both infer routes (unversioned and versioned): the ASGI endpoint, and :meth:`answer`,
    which the direct HTTP/1.1 path (``direct``) calls with the body it read itself."""

    def __init__(self, dataplane: DataPlane, forward: HeaderForward | None = None) -> None:
        self.dp = dataplane
        #: ``--http-header-forward-pattern``: matching headers become request parameters.
        self.forward = forward
        #: Shared-memory regions inputs are read from and outputs written to.
        self.regions = dataplane.shared_memory.regions
        self.plans = HeaderPlans(regions=self.regions)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await send_reply(send, json_reply(405, error_body("Method Not Allowed"), _ALLOW_POST))
            return
        params = scope["path_params"]
        try:
            body = await _read_body(receive)
        except Exception as exc:  # a chunked body past the limit (BodyLimit answers instead)
            reply = failure(exc, scope["path"])
        else:
            head = RequestHead(scope["headers"])
            limit = scope.get("inferd.max_input_size")
            reply = await self.answer(head, body, params["model"], params.get("version", ""), limit, scope["path"])
        await send_reply(send, reply)

    async def answer(
        self, head: RequestHead, body: bytes, model: str, version: str, limit: int | None, path: str
    ) -> Reply:
        """The reply to one infer request whose whole body is ``body``: decode, run on the version
        resolved once, encode (compressed when the client asked); errors as their replies. With
        ``endpoint-load-metrics-format``, the reply carries an ORCA load report."""
        reply = await self._answer(head, body, model, version, limit, path)
        if head.load_format is not None:
            value = report(self.dp, head.load_format)
            if value is not None:
                reply.headers.append((_LOAD_REPORT, value.encode("latin-1")))
        return reply

    async def _answer(
        self, head: RequestHead, body: bytes, model: str, version: str, limit: int | None, path: str
    ) -> Reply:
        if self.dp.access_log is not None:  # --access-log
            return await self._logged(head, body, model, version, limit, path)
        try:
            body = decode_body(body, head.encoding, limit)
            request, binary_output, info = self._decode(body, head.header_length, model, version)
            if self.forward is not None:
                self.forward.add_raw(request.parameters, head.headers)
            sinks = bind_outputs(request, self.regions) if request.outputs else None
            response = await self.dp.infer(request, info)
            if sinks is not None:
                sinks.write(response)
            parts, json_length = encode_response(response, request, binary_output)
        except Exception as exc:
            return failure(exc, path)
        coding = None if head.accept is None else response_coding(head.accept)
        reply: Reply
        if coding is not None:
            reply = await _compressed(parts, json_length, coding)
        elif json_length is None:
            reply = json_reply(200, parts[0])
        else:
            reply = _binary_reply(parts, json_length)
        if response.parameters:  # Server-Timing, x-tokens-used (inferd.frontends.reply_headers)
            reply.headers += [(k.encode(), v.encode("latin-1")) for k, v in reply_headers(response.parameters)]
        return reply

    async def _logged(
        self, head: RequestHead, body: bytes, model: str, version: str, limit: int | None, path: str
    ) -> Reply:
        """:meth:`_answer` with its line in the access log (``--access-log``): the same steps,
        apart so that a server without the log pays one check (bytes: as on the wire, compressed
        or not)."""
        access = self.dp.access_log
        assert access is not None
        request: InferRequest | None = None
        answered = version
        try:
            data = decode_body(body, head.encoding, limit)
            request, binary_output, info = self._decode(data, head.header_length, model, version)
            access.begin(request)
            if self.forward is not None:
                self.forward.add_raw(request.parameters, head.headers)
            sinks = bind_outputs(request, self.regions) if request.outputs else None
            response = await self.dp.infer(request, info)
            answered = response.model_version
            if sinks is not None:
                sinks.write(response)
            parts, json_length = encode_response(response, request, binary_output)
        except Exception as exc:
            reply = failure(exc, path)
        else:
            coding = None if head.accept is None else response_coding(head.accept)
            if coding is not None:
                reply = await _compressed(parts, json_length, coding)
            elif json_length is None:
                reply = json_reply(200, parts[0])
            else:
                reply = _binary_reply(parts, json_length)
            if response.parameters:  # Server-Timing, x-tokens-used (inferd.frontends.reply_headers)
                reply.headers += [(k.encode(), v.encode("latin-1")) for k, v in reply_headers(response.parameters)]
        size = sum(part.nbytes if isinstance(part, memoryview) else len(part) for part in reply.parts)
        access.entry("http", request, model, answered, str(reply.status), len(body), size)
        return reply

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
            parsed = parse_json(header_bytes, "request", walk=False)  # decode_request checks what it keeps
            request, binary_output = decode_request(parsed, binary, model, version, self.regions)
        else:
            request, binary_output = self.plans.decode(header_bytes, binary, model, version)
        return request, binary_output, self.dp.resolve(model, version)


class RequestHead:
    """What an infer request's headers say: ``Inference-Header-Content-Length``,
    ``Content-Encoding`` (lower case) and ``Accept-Encoding``; and the headers themselves."""

    __slots__ = ("header_length", "encoding", "accept", "headers", "load_format")

    def __init__(self, headers: Headers) -> None:
        """``headers``: lower-case names, as the HTTP/1.1 protocol (``serving/h1.py``) gives them."""
        self.headers = headers
        self.header_length: str | None = None
        self.encoding = ""
        self.accept: bytes | None = None
        #: ``endpoint-load-metrics-format``: the ORCA load report asked for (None: none).
        self.load_format: str | None = None
        for name, value in headers:
            if name == _HEADER_LENGTH:
                self.header_length = value.decode("latin-1")
            elif name == b"content-encoding":
                self.encoding = value.decode("latin-1").lower()
            elif name == b"accept-encoding":
                self.accept = value
            elif name == _LOAD_FORMAT:
                self.load_format = value.decode("latin-1")


def failure(exc: Exception, path: str) -> Reply:
    """The error reply for ``exc`` (logged with its traceback when unexpected: call it from an
    ``except`` block)."""
    status, body = error_reply(exc, path)
    if isinstance(exc, UnsupportedEncoding):
        return json_reply(status, body, [ACCEPTED_ENCODINGS])
    retry_after = getattr(exc, "retry_after", 0)  # a load on demand that did not happen in time
    return json_reply(status, body, [(b"retry-after", str(retry_after).encode())] if retry_after else None)


def _binary_reply(parts: list[bytes | memoryview], json_length: int) -> Reply:
    """A 200 with a JSON header and binary tensors (Triton's binary extension)."""
    extra = (_HEADER_LENGTH, str(json_length).encode())
    length = 0
    for part in parts:
        length += len(part)
    if length <= JOIN_LIMIT:
        parts = [b"".join(parts)]
    return Reply(200, [(b"content-type", _OCTETS), (b"content-length", str(length).encode()), extra], parts)


def json_reply(status: int, body: bytes | memoryview, extra: Headers | None = None) -> Reply:
    headers = [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]
    if extra:
        headers.extend(extra)
    return Reply(status, headers, [body])


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


async def send_reply(send: Send, reply: Reply) -> None:
    """``reply`` as ASGI messages: the start, then each part (tensor bytes uncopied)."""
    await send({"type": "http.response.start", "status": reply.status, "headers": reply.headers})
    parts = reply.parts
    if len(parts) == 1:
        await send({"type": "http.response.body", "body": parts[0]})
        return
    last = len(parts) - 1
    for i, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": i < last})


async def _compressed(parts: list[bytes | memoryview], json_length: int | None, coding: str) -> Reply:
    """A 200 whose body is compressed as ``coding``; ``Inference-Header-Content-Length`` counts
    the uncompressed JSON header, as in Triton."""
    length = 0
    for part in parts:
        length += len(part)
    body = await compress_body(parts, length, coding)
    if json_length is None:
        return json_reply(200, body, [(b"content-encoding", coding.encode())])
    headers = [
        (b"content-type", _OCTETS),
        (b"content-length", str(len(body)).encode()),
        (_HEADER_LENGTH, str(json_length).encode()),
        (b"content-encoding", coding.encode()),
    ]
    return Reply(200, headers, [body])
