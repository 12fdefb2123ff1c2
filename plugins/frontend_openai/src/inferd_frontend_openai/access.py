"""The server's access rules on the OpenAI port: :class:`Guarded` admits each request through the
HTTP port's :class:`~inferd.auth.AccessPolicy` (API keys and tenants, their limits, and
``--http-restricted-api``) and answers a refusal in OpenAI's error shape; :class:`OpenAIBodyLimit`
is ``--http-max-input-size``.

The routes' API groups are in :data:`~inferd_frontend_openai.app.ROUTES` (``/v1/models`` and
``/v1/models/{model}`` are ``metadata``, ``/v1/models/{model}/load`` and ``/unload``
``model-repository`` as the v2 repository API's load and unload, the rest ``inference``, as is a
path no route serves). A model the tenant may not see answers as an unknown one does (a 404
``model_not_found``): :class:`~inferd_frontend_openai.catalog.Catalog` reads the grant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from inferd.api import TOO_LARGE, AccessDenied, AccessPolicy, ApiGroup, BodyLimit, ErrorKind, InferdError
from inferd_frontend_openai.errors import OpenAIError, model_not_found

#: A refusal's kind -> OpenAI's status, error type and code for it.
REFUSALS: dict[ErrorKind, tuple[int, str, str | None]] = {
    ErrorKind.UNAUTHENTICATED: (401, "invalid_request_error", "invalid_api_key"),
    ErrorKind.FORBIDDEN: (403, "invalid_request_error", "permission_denied"),
    ErrorKind.RESTRICTED: (403, "invalid_request_error", "permission_denied"),
    ErrorKind.LIMITED: (429, "requests", "rate_limit_exceeded"),
}


def refusal(exc: AccessDenied) -> tuple[OpenAIError, tuple[tuple[str, str], ...]]:
    """A refusal as OpenAI answers it, and its headers (``WWW-Authenticate``, ``Retry-After``)."""
    status, type_, code = REFUSALS[exc.kind]
    if exc.reason == "token_limited":  # OpenAI's type for a tokens-per-minute limit
        type_ = "tokens"
    headers: tuple[tuple[str, str], ...] = ()
    if exc.kind is ErrorKind.UNAUTHENTICATED:
        headers = (("www-authenticate", "Bearer"),)
    elif exc.retry_after:
        headers = (("retry-after", str(exc.retry_after)),)
    return OpenAIError(status, exc.message, type_, None, code), headers


class Guarded:
    """``app`` behind ``policy``: one :meth:`AccessPolicy.admit` per request, the grant set as
    :data:`~inferd.auth.CURRENT` while the app answers (a stream included), then released."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, routes: Iterable[tuple[str, str, str, ApiGroup]]) -> None:
        """``routes``: the app's (path, method, endpoint, API group), e.g. :data:`~inferd_frontend_openai.app.ROUTES`."""
        self.app = app
        self.policy = policy
        #: The groups of the routes without parameters, by path, and the others' patterns in order
        #: (with their method: ``POST /v1/models/m/load`` is not ``GET /v1/models/{model:path}``).
        self.exact: dict[str, ApiGroup] = {}
        self.patterns: list[tuple[re.Pattern[str], str, ApiGroup]] = []
        for path, method, _, group in routes:
            if "{" in path:
                self.patterns.append((compile_path(path)[0], method, group))
            else:
                self.exact.setdefault(path, group)

    def group(self, path: str, method: str = "GET") -> tuple[ApiGroup, str]:
        """The API group of the route serving ``method path`` and the model it names ("" for
        none); a path no route serves is asked for as an inference request (then answered 404)."""
        group = self.exact.get(path)
        if group is not None:
            return group, ""
        for pattern, wanted, group in self.patterns:
            if wanted != method:
                continue
            match = pattern.match(path)
            if match is not None:
                return group, match.groupdict().get("model", "")
        return ApiGroup.INFERENCE, ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        group, model = self.group(scope["path"], scope["method"])
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            grant = self.policy.admit(group, model, headers)
        except AccessDenied as exc:
            await answer(send, *refusal(exc))
            return
        except InferdError:  # a model the tenant may not see
            await answer(send, model_not_found(model))
            return
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
