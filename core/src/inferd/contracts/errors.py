"""Errors that cross the core/frontend boundary.

Every error carries a :class:`ErrorKind`, which says what happened and nothing about a transport:
each frontend turns kinds into its own status codes with one table (``STATUS`` in
``frontends/http/errors.py`` and ``frontends/grpc/service.py``; the OpenAI frontend's
in its ``errors.py`` and ``access.py``), the way Triton maps ``TRITONSERVER_Error_Code``.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """The kind of failure, named after Triton's ``TRITONSERVER_Error_Code``."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    # The access outcomes of ``inferd.auth`` (Triton's codes have none but the first's answer):
    #: A restricted API group asked for without its header (``--http-restricted-api``...).
    RESTRICTED = "RESTRICTED"
    #: No API key, or one no tenant has (``--auth-config``).
    UNAUTHENTICATED = "UNAUTHENTICATED"
    #: The tenant may not use the API group.
    FORBIDDEN = "FORBIDDEN"
    #: The tenant is over one of its limits (rate, concurrency, tokens): retry later.
    LIMITED = "LIMITED"


class InferdError(Exception):
    """An error with a kind and a message meant for the client."""

    kind: ErrorKind = ErrorKind.UNKNOWN
    #: True for an error a model answered a request with (a response carrying an error) rather
    #: than a failed execution: Triton's backend releases such a request normally, so it counts
    #: as a success in the statistics (see :func:`error_response`).
    answered: bool = False

    def __init__(self, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def error_response(message: str, kind: ErrorKind) -> InferdError:
    """The error a model answered a request with: the client gets it, the statistics count the
    request as a success (inference_count and success), as Triton 2.51 counts a Python model's
    error response."""
    error = InferdError(message, kind)
    error.answered = True
    return error


class NotFound(InferdError):
    """No such model, version, tensor or region (Triton's NOT_FOUND)."""

    kind = ErrorKind.NOT_FOUND


class InvalidArgument(InferdError):
    """A request, setting or configuration that is wrong (Triton's INVALID_ARG: HTTP 400)."""

    kind = ErrorKind.INVALID_ARG


class Unavailable(InferdError):
    """Not now: a model not ready, unloading, or a queue full (Triton's UNAVAILABLE)."""

    kind = ErrorKind.UNAVAILABLE


class Unsupported(InferdError):
    """Something inferd or the model does not do (Triton's UNSUPPORTED)."""

    kind = ErrorKind.UNSUPPORTED


class InternalError(InferdError):
    """A failure inside the server or a model (Triton's INTERNAL: HTTP 500)."""

    kind = ErrorKind.INTERNAL


class Cancelled(InferdError):
    """A request its client or the server gave up on (Triton's CANCELLED)."""

    kind = ErrorKind.CANCELLED


class ConfigError(InvalidArgument):
    """A model configuration that cannot be parsed or is inconsistent."""


class StartupError(InferdError):
    """The server cannot start as asked: a flag's value, a port it cannot bind, a file that does
    not load, models that failed at start-up. Library code and plugins raise it (never
    ``SystemExit``); ``inferd serve`` prints ``error: <message>`` and exits with status 1. It
    never reaches a client."""

    kind = ErrorKind.INTERNAL


def poll_failure(name: str) -> str:
    """Triton's sentence for a load whose model (or override) cannot be read."""
    return f"failed to load '{name}', failed to poll from model repository"
