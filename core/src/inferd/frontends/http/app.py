"""The KServe v2 / Triton HTTP routes as one Starlette application.

:data:`ROUTES` says where each route is served, by which method of :class:`Endpoints`, and its API
group (what ``--http-restricted-api`` and the tenants' rights admit it as).
Every route decodes bodies with ``errors.decode_body`` and answers errors through
``errors.error_reply``. The infer routes (the hot path) are raw ASGI routes of the same app;
:class:`HttpApp` dispatches requests that match them straight to them, ahead of Starlette's
middleware and router (which would route them the same way, about 7 us later).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.auth import AccessPolicy, ApiGroup, visible_entries
from inferd.config import config_to_json
from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.frontends.header_forward import HeaderForward
from inferd.frontends.http.access import AdmittedInfer, admitted, admitted_answer
from inferd.frontends.http.codec import parse_json
from inferd.frontends.http.errors import decode_body, error_body, error_reply
from inferd.frontends.http.generate import NOT_ONE_RESPONSE, decode_generate, encode_generate, sse_event
from inferd.frontends.http.infer import InferEndpoint, RequestHead
from inferd.frontends.load_report import FORMAT_HEADER, REPORT_HEADER, report
from inferd.frontends.reply_headers import reply_headers
from inferd.frontends.repository_name import check_repository_name
from inferd.serving import Handler, Headers, Reply
from inferd.shared_memory.service import register_request
from inferd.views import results_json
from inferd.views.status import PAGE, PLOT_HEADERS, status_plot, status_view

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.contracts.types import InferRequest, InferResponse

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


class HttpRoute(NamedTuple):
    """One route: where it is served (``method`` "" for any: the endpoint answers 405 itself), its
    :class:`Endpoints` method, and the API group the access rules admit it as."""

    path: str
    method: str
    endpoint: str
    group: ApiGroup


_M = "/v2/models/{model}"
_MV = "/v2/models/{model}/versions/{version:int}"
_HEALTH, _METADATA, _INFERENCE = ApiGroup.HEALTH, ApiGroup.METADATA, ApiGroup.INFERENCE
_REPOSITORY, _SHM = ApiGroup.MODEL_REPOSITORY, ApiGroup.SHARED_MEMORY
#: Every route but infer, matched in this order.
ROUTES: tuple[HttpRoute, ...] = (
    HttpRoute("/v2/health/live", "GET", "live", _HEALTH),
    HttpRoute("/v2/health/ready", "GET", "ready", _HEALTH),
    HttpRoute("/v2", "GET", "server_metadata", _METADATA),
    HttpRoute("/v2/models/stats", "GET", "model_stats", ApiGroup.STATISTICS),
    HttpRoute("/v2/repository/index", "POST", "repository_index", _REPOSITORY),
    HttpRoute("/v2/repository/{repo}/index", "POST", "repository_index", _REPOSITORY),
    HttpRoute("/v2/repository/models/{model}/load", "POST", "load", _REPOSITORY),
    HttpRoute("/v2/repository/{repo}/models/{model}/load", "POST", "load", _REPOSITORY),
    HttpRoute("/v2/repository/models/{model}/unload", "POST", "unload", _REPOSITORY),
    HttpRoute("/v2/repository/{repo}/models/{model}/unload", "POST", "unload", _REPOSITORY),
    # every tenant's requests and tokens (docs/traffic.md): an administrator's view
    HttpRoute("/v2/usage", "GET", "usage", _REPOSITORY),
    # the status page and what it shows (inferd's own: views/status.py), seen as the index is
    HttpRoute("/", "GET", "status_page", _REPOSITORY),
    HttpRoute("/v2/status", "GET", "status", _REPOSITORY),
    HttpRoute("/v2/status/plots/{name}", "GET", "status_plot", _REPOSITORY),
    *(
        HttpRoute(prefix + suffix, method, name, group)
        for prefix in (_M, _MV)
        for suffix, method, name, group in (
            ("", "GET", "model_metadata", _METADATA),
            ("/ready", "GET", "model_ready", _HEALTH),
            ("/config", "GET", "model_config", ApiGroup.MODEL_CONFIG),
            ("/stats", "GET", "model_stats", ApiGroup.STATISTICS),
            ("/generate", "POST", "generate", _INFERENCE),
            ("/generate_stream", "POST", "generate_stream", _INFERENCE),
        )
    ),
    HttpRoute("/v2/models/{model}/traffic", "GET", "traffic_get", _REPOSITORY),  # weighted versions (inferd's own)
    HttpRoute("/v2/models/{model}/traffic", "POST", "traffic_post", _REPOSITORY),
    HttpRoute("/v2/trace/setting", "GET", "trace_get", ApiGroup.TRACE),  # the trace and logging extensions
    HttpRoute("/v2/trace/setting", "POST", "trace_post", ApiGroup.TRACE),
    HttpRoute("/v2/models/{model}/trace/setting", "GET", "trace_get", ApiGroup.TRACE),
    HttpRoute("/v2/models/{model}/trace/setting", "POST", "trace_post", ApiGroup.TRACE),
    HttpRoute("/v2/logging", "GET", "logging_get", ApiGroup.LOGGING),
    HttpRoute("/v2/logging", "POST", "logging_post", ApiGroup.LOGGING),
    *(  # the shared-memory extensions; the endpoint tells system from CUDA by the path
        HttpRoute(f"/v2/{kind}sharedmemory{suffix}", method, name, _SHM)
        for kind in ("system", "cuda")
        for suffix, method, name in (
            ("/status", "GET", "shm_status"),
            ("/region/{region}/status", "GET", "shm_status"),
            ("/region/{region}/register", "POST", "shm_register"),
            ("/unregister", "POST", "shm_unregister"),
            ("/region/{region}/unregister", "POST", "shm_unregister"),
        )
    ),
)
#: The infer routes, matched first (the hot path: :class:`InferEndpoint`, also served directly
#: by :class:`DirectInfer`). ``digits`` keeps the version as written, where ``int`` would turn
#: ``01`` into ``1``.
INFER_ROUTES: tuple[HttpRoute, ...] = (
    HttpRoute("/v2/models/{model}/infer", "", "infer", _INFERENCE),
    HttpRoute("/v2/models/{model}/versions/{version:digits}/infer", "", "infer", _INFERENCE),
)


class _Digits(Convertor[str]):
    regex = "[0-9]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("digits", _Digits())


class HttpApp:
    """The HTTP frontend's ASGI application over one data plane."""

    def __init__(self, dp: DataPlane, forward_pattern: str | None = None) -> None:
        """``forward_pattern``: ``--http-header-forward-pattern`` (None: headers are not forwarded)."""
        endpoints = Endpoints(dp)
        access = dp.settings.access
        policy = access.http if access is not None else None
        self.policy = policy
        forward = None
        if forward_pattern is not None:
            forward = HeaderForward(forward_pattern, policy.secret_headers() if policy is not None else ())
        self.endpoint = InferEndpoint(dp, forward)
        infer_routes = [Route(r.path, self._infer_app(r.group)) for r in INFER_ROUTES]
        routes = [Route(r.path, _guarded(_endpoint(endpoints, r, policy)), methods=[r.method]) for r in ROUTES]
        self.app = Starlette(routes=[*infer_routes, *routes], exception_handlers={HTTPException: _on_http_error})
        #: The infer routes' own patterns, groups and apps, for the dispatch ahead of the router.
        self.infer_routes = [
            (route.path_regex, r.group, route.app) for route, r in zip(infer_routes, INFER_ROUTES, strict=True)
        ]

    def _infer_app(self, group: ApiGroup) -> ASGIApp:
        """The infer endpoint, behind the access policy (admitting it as ``group``) when there is one."""
        return self.endpoint if self.policy is None else AdmittedInfer(self.endpoint, self.policy, group)

    def direct_routes(self, max_body: int) -> DirectInfer:
        """The infer routes answered without ASGI (:mod:`inferd.serving.direct`)."""
        return DirectInfer(self.endpoint, [(p, g) for p, g, _ in self.infer_routes], max_body, self.policy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            path = scope["path"]
            for pattern, _, infer in self.infer_routes:
                match = pattern.match(path)
                if match is not None:
                    scope["path_params"] = match.groupdict()  # str and digits convert to themselves
                    await infer(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class DirectInfer:
    """The infer routes as :class:`~inferd.serving.DirectRoutes`: the same endpoint's
    :meth:`~inferd.frontends.http.infer.InferEndpoint.answer`, given the body inferd's HTTP/1.1
    protocol read. Requests they do not take (another method, chunked bodies...) reach
    :class:`HttpApp` over ASGI, which answers them as before."""

    def __init__(
        self,
        endpoint: InferEndpoint,
        patterns: list[tuple[re.Pattern[str], ApiGroup]],
        max_body: int,
        policy: AccessPolicy | None = None,
    ) -> None:
        self.endpoint = endpoint
        #: Each infer route's pattern and API group.
        self.patterns = patterns
        #: ``--http-max-input-size``: larger bodies go to ASGI, whose body limit refuses them.
        self.max_body = max_body
        #: The server's access rules for HTTP, applied as :class:`AdmittedInfer` applies them.
        self.policy = policy

    def handler(self, method: bytes, path: str) -> Handler | None:
        for pattern, group in self.patterns:
            match = pattern.match(path)
            if match is not None:
                params = match.groupdict()
                return partial(self._answer, group, params["model"], params.get("version") or "", path)
        return None

    def _answer(
        self, group: ApiGroup, model: str, version: str, path: str, headers: Headers, body: bytes
    ) -> Awaitable[Reply]:
        head = RequestHead(headers)
        if self.policy is None:
            return self.endpoint.answer(head, body, model, version, self.max_body, path)
        return admitted_answer(
            self.endpoint, self.policy, group, head, body, model, version, self.max_body, path, headers
        )


def _endpoint(endpoints: Endpoints, route: HttpRoute, policy: AccessPolicy | None) -> Endpoint:
    """The endpoint of ``route``, behind the access policy (as its group) when the server has one."""
    endpoint: Endpoint = getattr(endpoints, route.endpoint)
    return endpoint if policy is None else admitted(endpoint, route.endpoint, route.group, policy, endpoints.dp)


class Endpoints:
    """One method per route (but infer): health, metadata, generate, repository, trace, logging."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dp = dataplane

    async def live(self, request: Request) -> Response:
        return Response(status_code=200 if self.dp.is_live() else 400)

    async def ready(self, request: Request) -> Response:
        return Response(status_code=200 if await self.dp.is_ready() else 400)

    async def server_metadata(self, request: Request) -> Response:
        return _json(results_json.server_metadata(self.dp.server_metadata()))

    async def model_metadata(self, request: Request) -> Response:
        return _json(
            results_json.model_metadata(self.dp.model_metadata(request.path_params["model"], _version(request)))
        )

    async def model_ready(self, request: Request) -> Response:
        if await self.dp.model_ready(request.path_params["model"], _version(request)):
            return Response(status_code=200)
        return _json({"error": "Model version not ready"}, 400)

    async def model_config(self, request: Request) -> Response:
        return _json(config_to_json(self.dp.model_config(request.path_params["model"], _version(request))))

    async def model_stats(self, request: Request) -> Response:
        name = request.path_params.get("model", "")
        stats = visible_entries(await self.dp.model_statistics(name, _version(request)))
        return _json({"model_stats": [results_json.statistics(s) for s in stats]})

    async def generate(self, request: Request) -> Response:
        """One JSON object out (the generate extension); errors from the model answer 400, as in Triton."""
        if self.dp.access_log is not None:  # --access-log
            return await self._logged_generate(request)
        version = _version(request)
        info = self.dp.resolve(request.path_params["model"], version)
        infer_request = decode_generate(await _body(request), info, version)
        return self._generated(request, [item async for item in self.dp.stream(infer_request, info)])

    async def _logged_generate(self, request: Request) -> Response:
        """:meth:`generate` with its line in the access log (bytes: the bodies, before decoding)."""
        access = self.dp.access_log
        assert access is not None
        version = answered = _version(request)
        model = request.path_params["model"]
        infer_request: InferRequest | None = None
        raw = await request.body()
        try:
            info = self.dp.resolve(model, version)
            body = decode_body(
                raw, request.headers.get("content-encoding", "").lower(), request.scope.get("inferd.max_input_size")
            )
            infer_request = decode_generate(body, info, version)
            access.begin(infer_request)
            results = [item async for item in self.dp.stream(infer_request, info)]
            reply = self._generated(request, results)
            answered = next((r.model_version for r in results if not isinstance(r, InferdError)), version)
        except Exception as exc:
            status, text = error_reply(exc, request.url.path)
            reply = _json_bytes(text, status)
        access.entry("http", infer_request, model, answered, str(reply.status_code), len(raw), len(reply.body))
        return reply

    def _generated(self, request: Request, results: list[InferResponse | InferdError]) -> Response:
        """The reply of :meth:`generate` once its stream ended."""
        error = next((r for r in results if isinstance(r, InferdError)), None)
        if error is not None:
            return _json_bytes(error_body(error.message), 400)
        if len(results) != 1:
            return _json_bytes(error_body(NOT_ONE_RESPONSE), 400)
        (response,) = results
        assert not isinstance(response, InferdError)  # answered above
        reply = _json_bytes(encode_generate(response))
        if response.parameters:  # x-tokens-used (inferd.frontends.reply_headers)
            for name, value in reply_headers(response.parameters):
                reply.headers[name] = value
        return _load_report(request, reply, self.dp)

    async def generate_stream(self, request: Request) -> Response:
        """Server-sent events, one per response. The status follows the first response (400
        when it is an error, as in Triton); later errors arrive as ``data: {"error": ...}``."""
        version = _version(request)
        info = self.dp.resolve(request.path_params["model"], version)
        infer_request = decode_generate(await _body(request), info, version)
        info.validator.validate(infer_request)  # a bad request fails before the stream starts
        stream = self.dp.stream(infer_request, info)
        first = await anext(stream, None)
        status = 400 if isinstance(first, InferdError) else 200
        reply = StreamingResponse(_events(first, stream), status, media_type="text/event-stream")
        return _load_report(request, reply, self.dp)  # the load once the first response is out

    async def repository_index(self, request: Request) -> Response:
        _no_repository_name(request)
        params = await _json_body(request)
        ready_only = params.get("ready", False) if isinstance(params, dict) else False
        if type(ready_only) is not bool:
            raise InvalidArgument(
                f"attempt to access JSON non-boolean as boolean ('ready' must be a boolean, got {ready_only!r})"
            )
        return _json([results_json.repository_entry(e) for e in visible_entries(self.dp.repository_index(ready_only))])

    async def load(self, request: Request) -> Response:
        _no_repository_name(request)
        params = await _large_json_body(request)
        parameters = params.get("parameters", {}) if isinstance(params, dict) else {}
        if not isinstance(parameters, dict):
            raise InvalidArgument("load request 'parameters' must be a JSON object")
        await self.dp.load_model(request.path_params["model"], parameters)
        return Response(status_code=200)

    async def unload(self, request: Request) -> Response:
        _no_repository_name(request)
        params = await _json_body(request)
        parameters = params.get("parameters", {}) if isinstance(params, dict) else {}
        dependents = bool(parameters.get("unload_dependents", False))
        await self.dp.unload_model(request.path_params["model"], dependents)
        return Response(status_code=200)

    async def usage(self, request: Request) -> Response:
        return _json(results_json.usage(await self.dp.tenant_usage()))

    async def status_page(self, request: Request) -> Response:
        return Response(PAGE, media_type="text/html; charset=utf-8", headers={"cache-control": "no-cache"})

    async def status(self, request: Request) -> Response:
        return _json(await status_view(self.dp, dict(request.headers.items())))

    async def status_plot(self, request: Request) -> Response:
        body, kind = await status_plot(self.dp, request.path_params["name"])
        return Response(body, media_type=kind, headers=PLOT_HEADERS)

    async def traffic_get(self, request: Request) -> Response:
        return _json(results_json.traffic(self.dp.traffic(request.path_params["model"])))

    async def traffic_post(self, request: Request) -> Response:
        raw = await _body(request)  # a long weight stays text: refused naming its model and version
        body = parse_json(raw, "request", long_as_text=True) if raw.strip() else {}
        if not isinstance(body, dict) or ("weights" not in body and "shadow" not in body):
            raise InvalidArgument(
                'traffic request must be a JSON object with "weights": {"<version>": <weight>} '
                'and/or "shadow": "<version>[:<percent>]"'
            )
        shadow = body.get("shadow")
        if shadow is not None and not isinstance(shadow, str):
            raise InvalidArgument('traffic "shadow" must be a string: "<version>[:<percent>]", or "" for none')
        shown = await self.dp.set_traffic(request.path_params["model"], body.get("weights"), shadow)
        return _json(results_json.traffic(shown))

    async def trace_get(self, request: Request) -> Response:
        return _json(results_json.trace_settings(self.dp.trace_settings(request.path_params.get("model", ""))))

    async def trace_post(self, request: Request) -> Response:
        settings = await _settings_body(request, "trace setting request")
        current = await self.dp.update_trace_settings(settings, request.path_params.get("model", ""))
        return _json(results_json.trace_settings(current))

    async def logging_get(self, request: Request) -> Response:
        return _json(results_json.log_settings(self.dp.log_settings()))

    async def logging_post(self, request: Request) -> Response:
        current = await self.dp.update_log_settings(await _settings_body(request, "log setting request"))
        return _json(results_json.log_settings(current))

    async def shm_status(self, request: Request) -> Response:
        return _json(self.dp.shared_memory.status(_shm_kind(request), request.path_params.get("region", "")))

    async def shm_register(self, request: Request) -> Response:
        kind, name = _shm_kind(request), request.path_params["region"]
        self.dp.shared_memory.check_allowed()  # before the body, as Triton
        fields = register_request(await _json_body(request), kind)
        if kind == "system":
            await self.dp.shared_memory.register_system(name, fields["key"], fields["offset"], fields["byte_size"])
        else:
            await self.dp.shared_memory.register_cuda(
                name, fields["raw_handle"], fields["device_id"], fields["byte_size"]
            )
        return Response(status_code=200)

    async def shm_unregister(self, request: Request) -> Response:
        await self.dp.shared_memory.unregister(_shm_kind(request), request.path_params.get("region", ""))
        return Response(status_code=200)


def _shm_kind(request: Request) -> str:
    return "system" if "/v2/systemsharedmemory" in request.scope["path"] else "cuda"


def _no_repository_name(request: Request) -> None:
    check_repository_name(request.path_params.get("repo", ""))


def _version(request: Request) -> str:
    version = request.path_params.get("version")
    return "" if version is None else str(version)


async def _body(request: Request) -> bytes:
    encoding = request.headers.get("content-encoding", "").lower()
    return decode_body(await request.body(), encoding, request.scope.get("inferd.max_input_size"))


async def _json_body(request: Request) -> Any:
    """The body's JSON; ``{}`` for an empty body."""
    body = await _body(request)
    return parse_json(body, "request") if body.strip() else {}


#: A body from this size on is inflated and parsed on a worker thread (:func:`_large_json_body`).
_PARSED_OFF_LOOP = 256 << 10


async def _large_json_body(request: Request) -> Any:
    """:func:`_json_body` for a route whose body may be megabytes (a load request's config and
    files): from :data:`_PARSED_OFF_LOOP` bytes, or compressed (a small body may inflate to the
    limit), inflated and parsed off the event loop."""
    raw = await request.body()
    encoding = request.headers.get("content-encoding", "").lower()
    limit = request.scope.get("inferd.max_input_size")
    if len(raw) < _PARSED_OFF_LOOP and encoding in ("", "identity"):
        return _parsed(raw, encoding, limit)
    return await asyncio.to_thread(_parsed, raw, encoding, limit)


def _parsed(raw: bytes, encoding: str, limit: int | None) -> Any:
    body = decode_body(raw, encoding, limit)
    return parse_json(body, "request") if body.strip() else {}


async def _settings_body(request: Request, what: str) -> dict[str, Any]:
    body = await _body(request)
    if not body.strip():
        return {}
    settings = parse_json(body, what)
    if not isinstance(settings, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(settings).__name__}")
    return settings


def _json(obj: Any, status: int = 200) -> Response:
    return _json_bytes(json.dumps(obj, separators=(",", ":")).encode(), status)


def _load_report(request: Request, reply: Response, dp: DataPlane) -> Response:
    """``reply`` with the ORCA load report the request asked for, if it asked (``generate``)."""
    asked = request.headers.get(FORMAT_HEADER)
    value = None if asked is None else report(dp, asked)
    if value is not None:
        reply.headers[REPORT_HEADER] = value
    return reply


def _json_bytes(body: bytes, status: int = 200) -> Response:
    return Response(body, status, media_type="application/json")


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _json({"error": exc.detail}, exc.status_code)


def _guarded(endpoint: Endpoint) -> Endpoint:
    """Answer errors through :func:`~inferd.frontends.http.errors.error_reply`: the server
    never answers with a crash."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:
            status, body = error_reply(exc, request.url.path)
            return _json_bytes(body, status)

    return guarded


async def _events(
    first: InferResponse | InferdError | None, stream: AsyncIterator[InferResponse | InferdError]
) -> AsyncIterator[bytes]:
    """The SSE body of generate_stream: every response, then the end of the stream."""
    item = first
    try:
        while item is not None:
            if isinstance(item, InferdError):
                yield sse_event(error_body(item.message))
            else:
                yield sse_event(encode_generate(item))
            item = await anext(stream, None)
    except Exception as exc:  # the status is already sent: report in-stream
        log.exception("generate_stream failed")
        yield sse_event(error_body(f"internal error: {type(exc).__name__}: {exc}"))
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
