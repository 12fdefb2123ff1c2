"""The server's access rules on the OpenAI port: :class:`Guarded` admits each request through the
HTTP port's :class:`~inferd.auth.AccessPolicy` (API keys and tenants, their limits, and
``--http-restricted-api``) and answers a refusal in OpenAI's error shape; :class:`OpenAIBodyLimit`
is ``--http-max-input-size``.

The routes' API groups: ``/v1/models`` and ``/v1/models/{model}`` are ``metadata``, the rest
``inference``. A model the tenant may not see answers as an unknown one does (a 404
``model_not_found``): :class:`~inferd_frontend_openai.catalog.Catalog` reads the grant.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.api import InferdError
from inferd.auth import AccessDenied, AccessPolicy, ApiGroup
from inferd.serving import TOO_LARGE, BodyLimit
from inferd_frontend_openai.errors import OpenAIError, model_not_found

_MODELS = "/v1/models"
_MODEL = "/v1/models/"
#: A refusal's status -> OpenAI's error type and code for it.
_KINDS: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"),
    429: ("requests", "rate_limit_exceeded"),
}


class Guarded:
    """``app`` behind ``policy``: one :meth:`AccessPolicy.admit` per request, the grant set as
    :data:`~inferd.auth.CURRENT` while the app answers (a stream included), then released."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path: str = scope["path"]
        model = path[len(_MODEL) :] if path.startswith(_MODEL) else ""
        group = ApiGroup.METADATA if model or path == _MODELS else ApiGroup.INFERENCE
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            grant = self.policy.admit(group, model, headers)
        except AccessDenied as exc:
            type_, code = _KINDS.get(exc.http_status, ("invalid_request_error", None))
            if exc.reason == "token_limited":  # OpenAI's type for a tokens-per-minute limit
                type_ = "tokens"
            return await answer(send, OpenAIError(exc.http_status, exc.message, type_, None, code), exc.headers)
        except InferdError:  # a model the tenant may not see
            return await answer(send, model_not_found(model))
        with grant.serving():
            await self.app(scope, receive, send)


class OpenAIBodyLimit(BodyLimit):
    """:class:`~inferd.serving.BodyLimit` whose refusal (400, the connection closed) is in
    OpenAI's error shape, with the HTTP port's sentence."""

    async def _refuse(self, send: Send, size: str) -> None:
        error = OpenAIError(400, TOO_LARGE.format(size=size, limit=self.limit), "invalid_request_error")
        await answer(send, error, (("connection", "close"),))


async def answer(send: Send, error: OpenAIError, headers: tuple[tuple[str, str], ...] = ()) -> None:
    """Send ``error`` as the whole response, with ``headers`` (e.g. ``Retry-After``)."""
    body = error.json()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": error.status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
