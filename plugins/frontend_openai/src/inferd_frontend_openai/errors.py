"""OpenAI's error body, ``{"error": {"message", "type", "param", "code"}}``, and its status codes."""

from __future__ import annotations

import json

from inferd.api import ErrorKind, InferdError

#: inferd's error kinds as OpenAI's status codes and error types.
_BY_KIND: dict[ErrorKind, tuple[int, str]] = {
    ErrorKind.INVALID_ARG: (400, "invalid_request_error"),
    ErrorKind.NOT_FOUND: (404, "invalid_request_error"),
    ErrorKind.UNAVAILABLE: (503, "server_error"),
    ErrorKind.UNSUPPORTED: (400, "invalid_request_error"),
}


class OpenAIError(Exception):
    """An error answered as OpenAI answers it: ``status`` and the error object's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def json(self) -> bytes:
        return json.dumps(self.body()).encode()


def bad_request(message: str, param: str | None = None) -> OpenAIError:
    """A 400: the request's ``param`` is wrong."""
    return OpenAIError(400, message, "invalid_request_error", param)


def model_not_found(model: str, suggestion: str | None = None) -> OpenAIError:
    """A 404, in OpenAI's words; then the closest model the caller may see, when one is close."""
    hint = f" Did you mean `{suggestion}`?" if suggestion else ""
    return OpenAIError(
        404, f"The model `{model}` does not exist.{hint}", "invalid_request_error", "model", "model_not_found"
    )


def from_inferd(exc: InferdError) -> OpenAIError:
    """An error inferd raised (the model's own, or the server's) as an OpenAI error."""
    status, type_ = _BY_KIND.get(exc.kind, (500, "server_error"))
    return OpenAIError(status, exc.message, type_)
