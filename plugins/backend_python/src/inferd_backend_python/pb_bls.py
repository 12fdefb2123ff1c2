"""BLS: a model's own ``InferenceRequest`` run on another model of the server, from its thread.

``run`` answers ``exec()`` (one response; errors come back inside it). ``stream`` answers
``exec(decoupled=True)``: a :class:`ResponseIterator` over every response of the called model,
each as it comes, ending after the final one. As Triton does, a decoupled model whose last
response was not flagged final (it closed with a flag-only ``send``) yields one empty response
last.
"""

from __future__ import annotations

from collections.abc import Iterator

from inferd.api import InferdError, InferRequest, InferResponse, ModelClient
from inferd_backend_python.pb_tensor import InferenceResponse, TritonError, TritonModelException, error_from_inferd


def _no_server(model: str) -> InferenceResponse:
    return InferenceResponse(
        error=TritonError(
            f"cannot run a BLS request on model '{model}': this model is not running inside an inferd server",
            TritonError.UNAVAILABLE,
        )
    )


def _failed(model: str, error: InferdError) -> InferenceResponse:
    """A request that could not run, as Triton words it: ``Model <name> - Error when running inference: ...``."""
    failed = error_from_inferd(error)
    return InferenceResponse(
        error=TritonError(f"Model {model} - Error when running inference: {failed.message()}", failed.code())
    )


def _as_response(item: InferResponse | InferdError) -> InferenceResponse:
    if isinstance(item, InferdError):
        return InferenceResponse(error=error_from_inferd(item))
    return InferenceResponse._from_inferd(item)


def run(models: ModelClient | None, request: InferRequest) -> InferenceResponse:
    """``exec()``: block for the one response of ``request``."""
    if models is None:
        return _no_server(request.model_name)
    try:
        return InferenceResponse._from_inferd(models.infer_from_thread(request))
    except InferdError as exc:
        return _failed(request.model_name, exc)
    except TritonModelException:
        raise
    except Exception as exc:
        return InferenceResponse(error=TritonError(f"{type(exc).__name__}: {exc}"))


class ResponseIterator:
    """The responses of a BLS request with ``decoupled=True``; ``next()`` blocks for the next one."""

    def __init__(self, items: Iterator[InferResponse | InferdError] | None, first: InferenceResponse | None = None):
        self._items = items
        self._pending = first
        self._last: InferResponse | InferdError | None = None
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._done = self._items is None
            return pending
        if self._done or self._items is None:
            raise StopIteration
        item = next(self._items, None)
        if item is not None:
            self._last = item
            return _as_response(item)
        self._done = True
        last = self._last
        if last is None or (isinstance(last, InferResponse) and not last.final):
            return InferenceResponse()  # the flag-only final response
        raise StopIteration

    def cancel(self) -> None:
        """Accepted for compatibility: inferd lets the called model run to its end."""


def stream(models: ModelClient | None, request: InferRequest) -> ResponseIterator:
    """``exec(decoupled=True)``: start ``request`` now and iterate its responses."""
    if models is None:
        return ResponseIterator(None, _no_server(request.model_name))
    try:
        return ResponseIterator(models.stream_from_thread(request))
    except InferdError as exc:
        return ResponseIterator(None, _failed(request.model_name, exc))
