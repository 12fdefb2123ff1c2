"""The KServe v2 / Triton HTTP routes as a Starlette application."""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from inferd.config import config_to_json
from inferd.default_plugins.http.codec import STATUS, parse_json
from inferd.default_plugins.http.fast_path import InferFastPath
from inferd.default_plugins.http.generate import (
    NOT_ONE_RESPONSE,
    decode_generate,
    encode_generate,
    error_body,
    sse_event,
)
from inferd.default_plugins.http.observability import observability_routes
from inferd.errors import InferdError, InvalidArgument

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane
    from inferd.types import InferResponse

log = logging.getLogger(__name__)

def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj, separators=(",", ":")), status, media_type="application/json")


def error_response(exc: InferdError) -> Response:
    return _json({"error": exc.message}, STATUS.get(exc.kind, 400))


async def _body(request: Request) -> bytes:
    body = await request.body()
    encoding = request.headers.get("content-encoding", "").lower()
    if encoding == "gzip":
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


def build_app(dp: DataPlane) -> InferFastPath:
    """Routes of the HTTP frontend over one data plane."""

    def version_of(request: Request) -> str:
        version = request.path_params.get("version")
        return "" if version is None else str(version)

    async def live(request: Request) -> Response:
        return Response(status_code=200 if dp.is_live() else 400)

    async def ready(request: Request) -> Response:
        return Response(status_code=200 if dp.is_ready() else 400)

    async def server_metadata(request: Request) -> Response:
        return _json(dp.server_metadata())

    async def model_metadata(request: Request) -> Response:
        return _json(dp.model_metadata(request.path_params["model"], version_of(request)))

    async def model_ready(request: Request) -> Response:
        if dp.model_ready(request.path_params["model"], version_of(request)):
            return Response(status_code=200)
        return _json({"error": "Model version not ready"}, 400)

    async def model_config(request: Request) -> Response:
        return _json(config_to_json(dp.model_config(request.path_params["model"], version_of(request))))

    async def model_stats(request: Request) -> Response:
        name = request.path_params.get("model", "")
        return _json({"model_stats": dp.model_statistics(name, version_of(request))})

    async def generate(request: Request) -> Response:
        """One JSON object out (the generate extension); errors from the model answer 400, as in Triton."""
        version = version_of(request)
        mv = dp.model(request.path_params["model"], version)
        infer_request = decode_generate(await _body(request), mv, version)
        results = [item async for item in dp.stream(infer_request)]
        error = next((r for r in results if isinstance(r, InferdError)), None)
        if error is not None:
            return Response(error_body(error.message), 400, media_type="application/json")
        if len(results) != 1:
            return Response(error_body(NOT_ONE_RESPONSE), 400, media_type="application/json")
        return Response(encode_generate(results[0]), media_type="application/json")

    async def generate_stream(request: Request) -> Response:
        """Server-sent events, one per response. The status follows the first response (400
        when it is an error, as in Triton); later errors arrive as ``data: {"error": ...}``."""
        version = version_of(request)
        mv = dp.model(request.path_params["model"], version)
        infer_request = decode_generate(await _body(request), mv, version)
        mv.validator.validate(infer_request)  # a bad request fails before the stream starts
        stream = dp.stream(infer_request)
        first = await anext(stream, None)
        status = 400 if isinstance(first, InferdError) else 200
        return StreamingResponse(_events(first, stream), status, media_type="text/event-stream")

    async def repository_index(request: Request) -> Response:
        body = await _body(request)
        params = parse_json(body, "request") if body.strip() else {}
        ready_only = bool(params.get("ready", False)) if isinstance(params, dict) else False
        return _json(dp.repository_index(ready_only))

    async def load(request: Request) -> Response:
        body = await _body(request)
        params = parse_json(body, "request") if body.strip() else {}
        parameters = params.get("parameters", {}) if isinstance(params, dict) else {}
        if not isinstance(parameters, dict):
            raise InvalidArgument("load request 'parameters' must be a JSON object")
        await dp.load_model(request.path_params["model"], parameters)
        return Response(status_code=200)

    async def unload(request: Request) -> Response:
        body = await _body(request)
        params = parse_json(body, "request") if body.strip() else {}
        parameters = params.get("parameters", {}) if isinstance(params, dict) else {}
        await dp.unload_model(request.path_params["model"], bool(parameters.get("unload_dependents", False)))
        return Response(status_code=200)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _json({"error": exc.detail}, exc.status_code)

    m = "/v2/models/{model}"
    mv = "/v2/models/{model}/versions/{version:int}"
    routes = [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        Route("/v2/models/stats", model_stats, methods=["GET"]),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/v2/repository/{repo}/index", repository_index, methods=["POST"]),
        Route("/v2/repository/models/{model}/load", load, methods=["POST"]),
        Route("/v2/repository/{repo}/models/{model}/load", load, methods=["POST"]),
        Route("/v2/repository/models/{model}/unload", unload, methods=["POST"]),
        Route("/v2/repository/{repo}/models/{model}/unload", unload, methods=["POST"]),
    ]
    for prefix in (m, mv):
        routes += [
            Route(prefix, model_metadata, methods=["GET"]),
            Route(prefix + "/ready", model_ready, methods=["GET"]),
            Route(prefix + "/config", model_config, methods=["GET"]),
            Route(prefix + "/stats", model_stats, methods=["GET"]),
            Route(prefix + "/generate", generate, methods=["POST"]),
            Route(prefix + "/generate_stream", generate_stream, methods=["POST"]),
        ]
    routes += observability_routes(dp)  # trace and logging extensions
    routes = [Route(r.path, _guarded(r.endpoint), methods=list(r.methods or ())) for r in routes]
    app = Starlette(routes=routes, exception_handlers={HTTPException: on_http_error})
    return InferFastPath(app, dp)  # the infer route itself is served there, ahead of Starlette


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


def _guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turn errors into Triton's ``{"error": ...}`` bodies; the server never answers with a crash."""

    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except InferdError as exc:
            return error_response(exc)
        except zlib.error as exc:
            return _json({"error": f"failed to decompress the request body: {exc}"}, 400)
        except Exception as exc:
            log.exception("unhandled error on %s", request.url.path)
            return _json({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)

    return guarded
