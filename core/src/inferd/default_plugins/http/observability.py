"""HTTP routes of the trace and logging extensions (the logic lives in the data plane)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferd.default_plugins.http.codec import parse_json
from inferd.errors import InvalidArgument

if TYPE_CHECKING:
    from inferd.dataplane import DataPlane


def _json(obj: Any) -> Response:
    return Response(json.dumps(obj, separators=(",", ":")), 200, media_type="application/json")


async def _settings_body(request: Request, what: str) -> dict[str, Any]:
    body = await request.body()
    if not body.strip():
        return {}
    settings = parse_json(body, what)
    if not isinstance(settings, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(settings).__name__}")
    return settings


def observability_routes(dp: DataPlane) -> list[Route]:
    """``/v2[/models/{model}]/trace/setting`` and ``/v2/logging``, GET and POST."""

    async def trace_get(request: Request) -> Response:
        return _json(dp.trace_settings(request.path_params.get("model", "")))

    async def trace_post(request: Request) -> Response:
        settings = await _settings_body(request, "trace setting request")
        return _json(dp.update_trace_settings(settings, request.path_params.get("model", "")))

    async def logging_get(request: Request) -> Response:
        return _json(dp.log_settings())

    async def logging_post(request: Request) -> Response:
        return _json(dp.update_log_settings(await _settings_body(request, "log setting request")))

    return [
        Route("/v2/trace/setting", trace_get, methods=["GET"]),
        Route("/v2/trace/setting", trace_post, methods=["POST"]),
        Route("/v2/models/{model}/trace/setting", trace_get, methods=["GET"]),
        Route("/v2/models/{model}/trace/setting", trace_post, methods=["POST"]),
        Route("/v2/logging", logging_get, methods=["GET"]),
        Route("/v2/logging", logging_post, methods=["POST"]),
    ]
