"""Requests, response senders, BLS calls and the logger of Triton's ``pb_utils``.

A request ``execute`` receives wraps an inferd :class:`~inferd.contracts.types.InferRequest` (inputs are
turned into ``Tensor`` views only when the model asks for them). A request a model builds itself
is a BLS call, run through the server's data plane from the instance thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.api import ErrorKind, InferdError, InferRequest, InferTensor, ModelClient, RequestedOutput
from inferd_backend_python import pb_bls
from inferd_backend_python.pb_bls import ResponseIterator
from inferd_backend_python.pb_tensor import (
    InferenceResponse,
    Tensor,
    TritonModelException,
    check_parameters,
    response_to_inferd,
)

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2

#: ``request.context`` key of an isolated model's requests: a callable that asks the server
#: whether the request was cancelled (the stub's copy of the request cannot see the server's flag).
CANCEL_QUERY = "inferd.python.cancel_query"

#: Request parameters that Triton turns into request properties instead of passing them on. (Over
#: gRPC, Triton 2.51 passes ``binary_data_output`` on to the model; the HTTP frontend consumes it.)
_RESERVED_PARAMETERS = frozenset(("sequence_id", "sequence_start", "sequence_end", "priority", "timeout"))

_log = logging.getLogger("inferd.python")


# --- the model being run (for BLS and get_model_dir) ------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelBinding:
    """What the pb_utils objects of one model need from the server: set once per loaded model."""

    model_name: str
    model_version: str
    model_dir: Path
    decoupled: bool
    #: The server's other models (BLS); None outside a server.
    models: ModelClient | None = None


_CURRENT: ContextVar[ModelBinding | None] = ContextVar("inferd_python_model", default=None)
_last_bound: list[ModelBinding | None] = [None]


def bind(binding: ModelBinding) -> None:
    """Make ``binding`` the current model of this thread (and the fallback for threads models start)."""
    if _CURRENT.get() is not binding:
        _CURRENT.set(binding)
    _last_bound[0] = binding


def current_binding() -> ModelBinding | None:
    return _CURRENT.get() or _last_bound[0]


# --- an execute on the server's event loop ----------------------------------------------------


class WouldWait(BaseException):
    """Raised in an ``execute`` running on the server's event loop at a call that would wait for
    the server (BLS): the batch runs again on the instance's thread. A ``BaseException``, so that
    a model's ``except Exception`` lets it through."""


class _Inline:
    """The ``execute`` that runs on the server's event loop now (the loop has one thread: one at a time)."""

    __slots__ = ("refused", "thread")

    def __init__(self) -> None:
        #: Its thread's ident; 0 when none runs there.
        self.thread = 0
        #: What it reached that waits for the server ("": nothing), kept even if the model caught the exception.
        self.refused = ""

    def refuse(self, what: str) -> None:
        """Raise :class:`WouldWait` when called from the ``execute`` on the loop."""
        if self.thread and self.thread == threading.get_ident():
            self.refused = what
            raise WouldWait(what)


INLINE = _Inline()


# --- requests ---------------------------------------------------------------------------------


def _cancelled(request: InferRequest | None) -> bool:
    """Whether the client of ``request`` went away (asking the server, in a stub)."""
    if request is None:
        return False
    if not request.cancelled:
        ask = request.context.get(CANCEL_QUERY)
        if ask is not None and ask():
            request.cancelled = True
    return request.cancelled


class InferenceResponseSender:
    """Sends the responses of one request: ``send(response=None, flags=0)``.

    Decoupled models may send any number of responses and must end with
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``. Default-mode models may send exactly one.
    """

    __slots__ = ("_binding", "_closed", "_lock", "_request", "response")

    def __init__(self, request: InferRequest, binding: ModelBinding) -> None:
        self._request = request
        self._binding = binding
        self._lock = threading.Lock()
        self._closed = False
        #: Default mode only: the one response sent (kept for ``execute`` to return).
        self.response: InferenceResponse | None = None

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            if final:
                self._closed = True
            if not self._binding.decoupled:
                if response is not None:
                    if self.response is not None:
                        raise TritonModelException(
                            f"model '{self._binding.model_name}' is not decoupled and may send "
                            "only one response per request"
                        )
                    self.response = response
                return
        if response is None and not final:
            return
        sender = self._request.response_sender
        if sender is None:
            raise TritonModelException(
                f"request '{self._request.id}' of model '{self._binding.model_name}' has no "
                "response sender (decoupled requests must come through the server)"
            )
        out = None
        if response is not None:
            try:
                out = response_to_inferd(response, self._request, self._binding.model_name, self._binding.model_version)
            except TritonModelException as exc:
                out = InferdError(str(exc), ErrorKind.INTERNAL)
        sender(out, final)

    def is_cancelled(self) -> bool:
        return _cancelled(self._request)

    @property
    def closed(self) -> bool:
        return self._closed


class InferenceRequest:
    """A request: the ones ``execute`` receives, or one a model builds to call another model (BLS).

    BLS: ``InferenceRequest(model_name=..., inputs=[Tensor...], requested_output_names=[...])``
    then ``.exec()`` (blocking) or ``await .async_exec()``.
    """

    __slots__ = (
        "_binding",
        "_correlation_id",
        "_flags",
        "_inferd",
        "_inputs",
        "_model_name",
        "_model_version",
        "_parameters",
        "_release_flags",
        "_request_id",
        "_requested",
        "_sender",
        "_timeout",
    )

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        model_name: str | bytes | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError("InferenceRequest needs 'model_name', 'inputs' and 'requested_output_names'")
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._inferd: InferRequest | None = None
        self._binding: ModelBinding | None = None
        self._inputs: list[Tensor] | None = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._requested = list(dict.fromkeys(requested_output_names))
        self._model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = check_parameters(parameters) if parameters else {}
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._sender: InferenceResponseSender | None = None

    @classmethod
    def _wrap(cls, request: InferRequest, binding: ModelBinding) -> InferenceRequest:
        """A view of an inferd request as ``execute`` receives it (inputs converted lazily)."""
        out = cls.__new__(cls)
        out._inferd = request
        out._binding = binding
        out._inputs = None
        out._sender = None
        out._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return out

    # -- read access (both kinds) --

    def inputs(self) -> list[Tensor]:
        if self._inputs is None:
            assert self._inferd is not None  # only a wrapped request converts its inputs lazily
            self._inputs = [Tensor._wrap(t.name, t.data, t.datatype) for t in self._inferd.inputs.values()]
        return self._inputs

    def request_id(self) -> str:
        return self._inferd.id if self._inferd is not None else self._request_id

    def correlation_id(self) -> int | str:
        if self._inferd is not None:
            correlation: int | str = self._inferd.parameters.get("sequence_id", 0)
            return correlation
        return self._correlation_id

    def flags(self) -> int:
        if self._inferd is None:
            return self._flags
        params = self._inferd.parameters
        flags = TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if params.get("sequence_start") else 0
        if params.get("sequence_end"):
            flags |= TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
        return flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        if self._inferd is not None:
            return int(self._inferd.parameters.get("timeout", 0))
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a compact JSON string, as Triton writes it (``json.loads`` it)."""
        if self._inferd is None:
            return json.dumps(self._parameters, separators=(",", ":"))
        params = self._inferd.parameters
        return json.dumps({k: v for k, v in params.items() if k not in _RESERVED_PARAMETERS}, separators=(",", ":"))

    def requested_output_names(self) -> set[str]:
        if self._inferd is not None:
            return {o.name for o in self._inferd.outputs}
        return set(self._requested)

    def model_name(self) -> str:
        return self._inferd.model_name if self._inferd is not None else self._model_name

    # -- execute-side API --

    def get_response_sender(self) -> InferenceResponseSender:
        if self._inferd is None or self._binding is None:
            raise TritonModelException("only requests passed to execute() have a response sender")
        if self._sender is None:
            self._sender = InferenceResponseSender(self._inferd, self._binding)
        return self._sender

    def is_cancelled(self) -> bool:
        return _cancelled(self._inferd)

    def set_release_flags(self, flags: int) -> None:
        self._release_flags = int(flags)

    # -- BLS --

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on another model and wait for its response (errors come back in it).

        ``decoupled=True``: a :class:`ResponseIterator` over every response, each as it comes.
        """
        INLINE.refuse("a BLS call")
        binding = current_binding()
        models = binding.models if binding is not None else None
        if decoupled:
            return pb_bls.stream(models, self._to_inferd())
        return pb_bls.run(models, self._to_inferd())

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """``exec`` in a worker thread, for ``async def execute`` models."""
        return await asyncio.to_thread(self.exec, decoupled)

    def _to_inferd(self) -> InferRequest:
        if self._inferd is not None:
            return self._inferd
        inputs: dict[str, InferTensor] = {}
        assert self._inputs is not None  # a request built by the model has its inputs
        for t in self._inputs:
            if not isinstance(t, Tensor):
                raise TritonModelException(f"BLS inputs must be pb_utils.Tensor objects, found type '{type(t)}'")
            a = t._array
            inputs[t._name] = InferTensor(t._name, t._wire_datatype(), a.shape, a)
        params: dict[str, Any] = dict(self._parameters)
        if self._correlation_id:
            params["sequence_id"] = self._correlation_id
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
            params["sequence_start"] = True
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
            params["sequence_end"] = True
        if self._timeout:
            params["timeout"] = self._timeout
        return InferRequest(
            model_name=self._model_name,
            model_version="" if self._model_version < 0 else str(self._model_version),
            id=self._request_id,
            inputs=inputs,
            outputs=[RequestedOutput(name) for name in self._requested],
            parameters=params,
        )


class PreferredMemory:
    """Accepted for compatibility; inferd returns BLS outputs in CPU memory."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


# --- logging ----------------------------------------------------------------------------------


class Logger:
    """Triton's model logger, writing to the ``inferd.python`` logging logger."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3
    _LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        _log.log(Logger._LEVELS.get(int(level), logging.INFO), "%s", message, stacklevel=2)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info("%s", message, stacklevel=2)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning("%s", message, stacklevel=2)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error("%s", message, stacklevel=2)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug("%s", message, stacklevel=2)
