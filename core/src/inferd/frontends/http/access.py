"""The HTTP frontend's side of ``inferd.auth``: each route asks the policy once, before it runs.

Only built when the server has access rules (``dataplane.settings.access``); without them the routes are
the plain endpoints and the infer path is untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.auth import AccessDenied, AccessPolicy, ApiGroup, Grant, Hidden, ModelAction, admit
from inferd.contracts.errors import InferdError
from inferd.frontends.http.errors import STATUS, error_body, error_headers, error_reply
from inferd.frontends.http.infer import send_reply
from inferd.serving import Reply

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.frontends.http.infer import InferEndpoint, RequestHead

Endpoint = Callable[[Request], Awaitable[Response]]


def _denied_response(exc: AccessDenied) -> Response:
    """A refusal: its status by the error table, ``{"error": ...}`` and its kind's headers."""
    response = Response(error_body(exc.message), STATUS[exc.kind])
    response.raw_headers = [h for h in response.raw_headers if h[0] != b"content-type"] + error_headers(exc)
    return response


#: The routes whose answer for a model the caller may not see is not an error (or not NOT_FOUND).
_ACTIONS = {"model_ready": ModelAction.READY, "load": ModelAction.LOAD, "unload": ModelAction.UNLOAD}


def _hidden_response(answer: Hidden) -> Response:
    """What a model the caller may not see answers, as an unknown model does."""
    if answer is Hidden.NOT_READY:
        return Response(b'{"error":"Model version not ready"}', 400, media_type="application/json")
    return Response(status_code=200)  # unloading an unknown model succeeds


def admitted(endpoint: Endpoint, name: str, group: ApiGroup, policy: AccessPolicy, dp: DataPlane) -> Endpoint:
    """``endpoint`` (route ``name`` of API ``group``) behind ``policy`` (:func:`inferd.auth.admit`):
    refused, or run with its grant in ``CURRENT``."""
    action = _ACTIONS.get(name, ModelAction.OTHER)

    async def call(request: Request) -> Response:
        model = request.path_params.get("model", "")
        try:
            grant = admit(policy, group, action, model, dict(request.headers.items()), dp)
        except AccessDenied as exc:
            return _denied_response(exc)
        if isinstance(grant, Hidden):
            return _hidden_response(grant)
        return await _run(endpoint(request), grant)

    return call


async def _run(call: Awaitable[Response], grant: Grant) -> Response:
    with grant.serving():
        return await call


def admit_infer(
    policy: AccessPolicy, group: ApiGroup, model: str, headers: list[tuple[bytes, bytes]], path: str
) -> Grant | Reply:
    """The policy's answer to an infer request (of API ``group``): its grant, or the refusal to
    send instead (a refusal, or the unknown-model error for a model the tenant may not see)."""
    fields = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
    try:
        return policy.admit(group, model, fields)
    except InferdError as exc:
        status, error = error_reply(exc, path)
        return Reply(status, [*error_headers(exc), (b"content-length", str(len(error)).encode())], [error])


class AdmittedInfer:
    """The infer routes behind ``policy`` (a raw ASGI app, as the infer endpoint is)."""

    def __init__(self, endpoint: ASGIApp, policy: AccessPolicy, group: ApiGroup) -> None:
        self.endpoint = endpoint
        self.policy = policy
        self.group = group

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        admission = admit_infer(self.policy, self.group, scope["path_params"]["model"], scope["headers"], scope["path"])
        if isinstance(admission, Reply):
            await send_reply(send, admission)
            return
        with admission.serving():
            await self.endpoint(scope, receive, send)


async def admitted_answer(
    endpoint: InferEndpoint,
    policy: AccessPolicy,
    group: ApiGroup,
    head: RequestHead,
    body: bytes,
    model: str,
    version: str,
    limit: int,
    path: str,
    headers: list[tuple[bytes, bytes]],
) -> Reply:
    """:class:`AdmittedInfer` for the direct path: the same refusals, the same bytes."""
    admission = admit_infer(policy, group, model, headers, path)
    if isinstance(admission, Reply):
        return admission
    with admission.serving():
        return await endpoint.answer(head, body, model, version, limit, path)
