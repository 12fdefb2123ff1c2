"""A ``TritonPythonModel`` object run in this process: its ``initialize`` and ``auto_complete_config``
and the instance that runs its ``execute`` (in the server, or in a stub process for an isolated model:
``inferd_backend_python.stub`` runs the same :class:`PythonInstance`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import resource
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from types import CoroutineType as _Coroutine
from typing import Any

from inferd.api import (
    RESCHEDULE,
    ErrorKind,
    InferdError,
    InferRequest,
    InferResponse,
    InstanceSpec,
    InternalError,
    InvalidArgument,
    RunOnThread,
    SyncInstance,
    Unsupported,
)
from inferd_backend_python.pb_config import ModelConfig as PbModelConfig
from inferd_backend_python.pb_request import (
    INLINE,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceRequest,
    ModelBinding,
    WouldWait,
    bind,
)
from inferd_backend_python.pb_tensor import TritonError, error_to_inferd, response_to_inferd
from inferd_backend_python.readiness import answer

_log = logging.getLogger("inferd.contracts.backend.python")


class _ExecuteError(Exception):
    """A broken ``execute`` contract (wrong return type or count); the message is Triton's."""


def run_auto_complete(as_json: dict[str, Any], hook: Any, name: str, path: Path | str) -> dict[str, Any]:
    """The config (JSON form) ``TritonPythonModel.auto_complete_config`` makes of ``as_json``."""
    try:
        result = hook(PbModelConfig(as_json))
    except ValueError as exc:
        raise InvalidArgument(f"{exc}; raised by auto_complete_config of model '{name}' in '{path}'") from exc
    except Exception as exc:
        raise InternalError(
            f"model '{name}': auto_complete_config in '{path}' failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(result, PbModelConfig):
        raise InvalidArgument(
            f"auto_complete_config function in model '{name}' must return a valid pb.ModelConfig object."
        )
    return result.as_dict()


def start_model_object(cls: type, args: dict[str, str], binding: ModelBinding, path: Path | str) -> Any:
    """A ``TritonPythonModel`` object, ``initialize``d with Triton's ``args``; errors name the instance."""
    bind(binding)
    instance = args["model_instance_name"]
    try:
        model = cls()
        initialize = getattr(model, "initialize", None)
        if initialize is not None:
            result = initialize(args)
            if inspect.iscoroutine(result):
                asyncio.run(result)
    except Exception as exc:
        _log.exception("model '%s' instance '%s': initialize failed", binding.model_name, instance)
        raise InternalError(
            f"model '{binding.model_name}' instance '{instance}': initialize in '{path}' failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return model


def instance_args(base: dict[str, str], spec: InstanceSpec) -> dict[str, str]:
    """Triton's ``initialize`` args for one instance: the model's, with the instance's own."""
    args = dict(base)
    args["model_instance_kind"] = spec.kind.removeprefix("KIND_")
    args["model_instance_name"] = spec.name
    args["model_instance_device_id"] = str(spec.device_id)
    return args


#: A batch with more input bytes than this runs on the instance's thread even when quick: there the loop
#: goes on reading the next requests while numpy computes without the GIL, and the arrays it makes come
#: from the thread's malloc arena, which keeps freed memory, where the loop's (the main thread's) gives
#: it back to the system after each and takes a page fault per 4 KiB on the next (measured: 2 MiB in,
#: c=1, ~2.4 ms of server CPU a request on the instance thread, ~7 ms on the loop, ~5.5 ms on a thread
#: pool's thread). Up to 256 KiB the loop wins: the hand-off to the thread and back costs more than
#: the arena does (benchmarks/large_tensors.py, a Python identity model, 256 KiB at c=8: the server's
#: CPU per request 0.40 ms on the loop against 0.56 ms on the thread over gRPC, 0.27 against 0.41
#: over HTTP).
INLINE_MAX_BYTES = 256 * 1024


class PythonInstance(SyncInstance):
    """One ``TritonPythonModel`` object; ``execute`` runs the model's ``execute`` on a batch.

    With ``inline`` (a plain ``execute``, not decoupled, that calls no other model: :func:`inline_reason`)
    core runs the executions its recent ones predict to be quick on the server's event loop, without the
    two thread hand-offs (and the fight for the GIL under load) that cost more than a small model's
    compute. An execution there that waited (sleep, I/O, a lock) or reached a BLS call turns that off
    for good: the instance runs on its own thread from then on (a BLS call's batch runs again there).
    """

    inline_max_bytes = INLINE_MAX_BYTES

    def __init__(self, binding: ModelBinding, iterative: bool, obj: Any, name: str, inline: bool = False) -> None:
        self._obj = obj
        self._execute = obj.execute
        self._binding = binding
        self._decoupled = binding.decoupled
        self._iterative = iterative
        self.name = name
        self.may_run_inline = inline and not binding.decoupled and not inspect.iscoroutinefunction(obj.execute)
        #: The thread of a batch refused on the loop (a BLS call); made when needed.
        self._loop: _LoopThread | None = None
        self._loop_lock = threading.Lock()
        #: The model defines ``is_ready`` (looked up once, as Triton's stub does).
        self.has_is_ready = callable(getattr(obj, "is_ready", None))
        #: Executions on the loop in a row that waited (:data:`INLINE_WAITS` of them: it leaves the loop).
        self._waits = 0
        #: When the running ``execute`` started (monotonic s; 0: none runs), for :data:`BLOCKED`.
        self.since = 0.0
        self.warned = 0.0
        self.warn_after = 0.0

    def execute(self, requests: Sequence[InferRequest]) -> Any:
        if self.may_run_inline:
            loop = _get_running_loop()
            if loop is not None:
                return self._on_loop(requests, loop)
        self.since = time.monotonic()
        try:
            return self._run(requests)
        finally:
            self.since = 0.0

    def _on_loop(
        self, requests: Sequence[InferRequest], loop: asyncio.AbstractEventLoop
    ) -> list[InferResponse | InferdError]:
        """Run the batch here, on the server's event loop, which the model does not see (``asyncio.run``
        works in it, as on a thread). Watch for a wait: an execution that spent more than
        :data:`INLINE_WAIT_NS` off the CPU in a wait of its own (a voluntary context switch, not the
        scheduler's preemption) held up every request of the server meanwhile; :data:`INLINE_WAITS`
        of them in a row and the instance leaves the loop (one alone may be a wait for the GIL that
        another thread of the server held, which a model that never waits meets on a busy machine)."""
        switches = _thread_usage(_RUSAGE_THREAD).ru_nvcsw
        start, cpu = time.monotonic_ns(), time.thread_time_ns()
        INLINE.thread = threading.get_ident()
        _set_running_loop(None)
        try:
            results = self._run(requests)
        except WouldWait:
            results = []
        finally:
            _set_running_loop(loop)
            INLINE.thread = 0
        waited = time.monotonic_ns() - start - (time.thread_time_ns() - cpu)
        if INLINE.refused:  # raised, or caught by the model: this execution's results do not count
            self._leave_loop(f"reached {INLINE.refused}, which waits for the server; this batch runs again there")
            INLINE.refused = ""
            raise RunOnThread
        if waited > INLINE_WAIT_NS and _thread_usage(_RUSAGE_THREAD).ru_nvcsw > switches:
            self._waits += 1
            if self._waits >= INLINE_WAITS:
                self._leave_loop(
                    f"waited {waited / 1e6:.1f} ms (sleep, I/O or a lock; {INLINE_WAITS} executions in a row), "
                    "holding up the server"
                )
        elif self._waits:
            self._waits = 0
        return results

    def _leave_loop(self, why: str) -> None:
        self.may_run_inline = False
        _log.info(
            "model '%s' instance '%s': execute on the event loop %s; it runs on the instance's thread from now on "
            "(always with parameter EXECUTE_INLINE off)",
            self._binding.model_name,
            self.name,
            why,
        )

    def _run(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        binding = self._binding
        bind(binding)
        wrapped = [InferenceRequest._wrap(r, binding) for r in requests]
        try:
            result = self._execute(wrapped)
            if type(result) is _Coroutine:  # inspect.iscoroutine costs a Python call a batch
                if INLINE.thread and INLINE.thread == threading.get_ident():  # the loop must not wait for it
                    result.close()
                    INLINE.refuse("a coroutine returned by execute")
                if self._decoupled:
                    self._loop_thread().submit(result).add_done_callback(
                        lambda f: self._async_done(f, requests, wrapped)
                    )
                    return []
                result = self._loop_thread().submit(result).result()
        except Exception as exc:
            return self._fail(requests, wrapped, exc)
        if self._decoupled:
            if result is not None:
                error = _ExecuteError(
                    f"Python model '{binding.model_name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
                self._fail(requests, wrapped, error)
            else:
                self._reschedule_decoupled(requests, wrapped)
            return []
        try:
            return self._collect(requests, wrapped, result)
        except Exception as exc:
            return self._fail(requests, wrapped, exc)

    def _collect(
        self, requests: Sequence[InferRequest], wrapped: list[InferenceRequest], result: Any
    ) -> list[InferResponse | InferdError]:
        name, version = self._binding.model_name, self._binding.model_version
        if result is None:  # every response went through the response senders
            result = [None] * len(requests)
        elif not isinstance(result, (list, tuple)):
            raise _ExecuteError(f"Expected a list in the execute return, found type '{type(result)}'.")
        elif len(result) != len(requests):
            raise _ExecuteError(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(result)}"
            )
        out: list[InferResponse | InferdError] = []
        for request, view, response in zip(requests, wrapped, result, strict=True):
            if response is None:
                sender = view._sender
                if sender is not None and sender.response is not None:
                    response = sender.response
                elif view._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                    out.append(self._reschedule(request))
                    continue
                else:
                    raise _ExecuteError(
                        "Expected an 'InferenceResponse' object in the execute function return "
                        f"list, found type '{type(None)}'."
                    )
            out.append(response_to_inferd(response, request, name, version))
        return out

    def _reschedule(self, request: InferRequest) -> InferResponse | InferdError:
        """Hand ``request`` back to the scheduler to run again, when the model is iterative."""
        if not self._iterative:
            return Unsupported(
                f"model '{self._binding.model_name}' released request '{request.id}' with "
                "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, but request rescheduling needs "
                "'sequence_batching { iterative_sequence: true }' in its config"
            )
        request.context[RESCHEDULE] = True
        return InferResponse(self._binding.model_name, self._binding.model_version, request.id)

    def _reschedule_decoupled(self, requests: Sequence[InferRequest], wrapped: list[InferenceRequest]) -> None:
        for request, view in zip(requests, wrapped, strict=True):
            if view._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                outcome = self._reschedule(request)
                if isinstance(outcome, InferdError) and request.response_sender is not None:
                    request.response_sender(outcome, True)

    def _fail(
        self, requests: Sequence[InferRequest], wrapped: list[InferenceRequest], exc: BaseException
    ) -> list[InferResponse | InferdError]:
        """Every request of the batch gets the error (decoupled: sent to open senders)."""
        error = self._error_for(exc)
        if self._decoupled:
            for request, view in zip(requests, wrapped, strict=True):
                sender = view._sender
                if request.response_sender is not None and (sender is None or not sender.closed):
                    request.response_sender(error, True)
            return []
        return [error] * len(requests)

    def _error_for(self, exc: BaseException) -> InferdError:
        detail = str(exc) if isinstance(exc, _ExecuteError) else f"{type(exc).__name__}: {exc}"
        message = f"Failed to process the request(s) for model '{self._binding.model_name}', message: {detail}"
        if isinstance(exc, _ExecuteError):
            _log.error("%s", message)
        else:
            _log.error("%s", message, exc_info=exc)
        if isinstance(exc, (TritonError, InferdError)):
            return InferdError(message, error_to_inferd(exc).kind)
        return InferdError(message, ErrorKind.INTERNAL)

    def _async_done(
        self, future: Future[Any], requests: Sequence[InferRequest], wrapped: list[InferenceRequest]
    ) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            self._fail(requests, wrapped, exc)

    def _loop_thread(self) -> _LoopThread:
        if self._loop is None:
            with self._loop_lock:  # is_ready may ask for it from another thread
                if self._loop is None:
                    self._loop = _LoopThread(f"inferd-python-{self.name}")
        return self._loop

    def user_ready(self) -> bool:
        """Call the model's ``is_ready`` (an ``async def`` one runs on the instance's event loop);
        raise when it raises or returns something other than a bool. Blocks: call it off the server's loop."""
        bind(self._binding)
        result = self._obj.is_ready()
        if inspect.iscoroutine(result):
            result = self._loop_thread().submit(result).result()
        return answer(result)

    def close(self) -> None:
        """Call the model's ``finalize`` (errors are logged) and stop its event loop, if any."""
        bind(self._binding)
        finalize = getattr(self._obj, "finalize", None)
        try:
            if finalize is not None:
                result = finalize()
                if inspect.iscoroutine(result):
                    asyncio.run(result)
        except Exception:
            _log.exception("model '%s' instance '%s': finalize failed", self._binding.model_name, self.name)
        finally:
            if self._loop is not None:
                self._loop.close()
                self._loop = None


#: How long an ``execute`` on the event loop may wait off the CPU before its instance leaves the loop.
INLINE_WAIT_NS = 1_000_000
#: How many executions in a row on the event loop must wait so long before the instance leaves it:
#: a model that sleeps waits every time; the GIL, held by another thread of the server when the loop
#: wants it back, makes a model that never waits look so now and then on a busy machine (it moved
#: add_sub off the loop for good a few seconds into a perf_analyzer run, at two thread hops a request).
INLINE_WAITS = 3


_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)  # Linux; elsewhere the process's
_thread_usage = resource.getrusage
_get_running_loop = asyncio._get_running_loop
_set_running_loop = asyncio._set_running_loop
#: What in a model's source says that it calls other models (BLS), which it must not do on the loop.
_CALLS_MODELS = re.compile(rb"InferenceRequest|\.exec\(|async_exec")
#: What in a model's source says that its ``execute`` may wait (sleep, a lock, an event, a queue, another
#: thread or process, the network, a client's cancellation), which would hold up the whole server there.
_MAY_WAIT = re.compile(
    rb"\bsleep\(|\.wait\(|\.wait_for\(|\.result\(|\.acquire\(|\.recv|\bis_cancelled\(|\binput\("
    rb"|\b(?:R?Lock|Event|Condition|(?:Bounded)?Semaphore|Barrier|Thread|ThreadPoolExecutor|ProcessPoolExecutor)\("
    rb"|^\s*(?:import|from)\s+(?:requests|urllib3?|http|httpx|aiohttp|socket|ssl|grpc|tritonclient|subprocess|select"
    rb"|selectors|queue|multiprocessing|concurrent|redis|boto3|botocore)\b",
    re.MULTILINE,
)
#: The most Python source :func:`inline_reason` reads in a model's directory before it gives up.
_SCAN_FILES, _SCAN_BYTES = 200, 8 << 20


def inline_reason(config: Any, name: str, model_dir: Path) -> str | None:
    """Why the model's executions must stay on its instances' threads, or None: quick ones may run on
    the server's event loop. Parameter ``EXECUTE_INLINE``: ``off``; ``auto`` (the default): not for a
    decoupled model, nor one whose ``.py`` files (its directory's) call other models or may wait;
    ``on``: whatever its source says (never for a decoupled one). Blocking: reads the model's files."""
    text = (
        config.parameters["EXECUTE_INLINE"].string_value.strip().lower()
        if "EXECUTE_INLINE" in config.parameters
        else ""
    )
    if text not in ("", "auto", "on", "off"):
        raise InvalidArgument(f"model '{name}': parameter EXECUTE_INLINE is '{text}'; expected 'auto', 'on' or 'off'")
    if text == "off":
        return "parameter EXECUTE_INLINE is off"
    if config.model_transaction_policy.decoupled:
        return "decoupled"
    if text == "on":
        return None
    budget = _SCAN_BYTES
    for count, path in enumerate(sorted(model_dir.rglob("*.py"))):
        try:
            data = path.read_bytes()[:budget] if count < _SCAN_FILES else b""
        except OSError:
            continue
        budget -= len(data)
        if count >= _SCAN_FILES or budget <= 0:
            return f"more Python source than {_SCAN_FILES} files or {_SCAN_BYTES >> 20} MiB to look through"
        for pattern, what in ((_CALLS_MODELS, "calls other models (BLS)"), (_MAY_WAIT, "may wait")):
            found = pattern.search(data)
            if found is not None:
                return f"'{path.relative_to(model_dir)}' {what}: '{found.group().strip().decode(errors='replace')}'"
    return None


#: Seconds an in-process ``execute`` may run before a warning says it is blocking its instance.
EXECUTE_WARN_SECS = 10.0


def execute_warn_secs(config: Any, name: str) -> float:
    """The model's ``EXECUTE_WARN_SECS`` parameter (0: no warning), or the default."""
    text = (
        config.parameters["EXECUTE_WARN_SECS"].string_value.strip() if "EXECUTE_WARN_SECS" in config.parameters else ""
    )
    if not text:
        return EXECUTE_WARN_SECS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value < 0:
        raise InvalidArgument(f"model '{name}': parameter EXECUTE_WARN_SECS is '{text}'; expected seconds (0: off)")
    return value


class _BlockedExecutions:
    """One thread that warns, once per execution, of an in-process ``execute`` running past its
    model's ``EXECUTE_WARN_SECS``: such a call holds its instance (and an unload or a shutdown
    waits for it); an in-process model cannot be interrupted, an isolated one can
    (``EXECUTE_TIMEOUT_SECS``)."""

    def __init__(self) -> None:
        self._instances: weakref.WeakSet[PythonInstance] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, instance: PythonInstance) -> None:
        with self._lock:
            self._instances.add(instance)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="inferd-python-blocked", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(0.5)
            self._check(time.monotonic())

    def _check(self, now: float) -> None:
        """Warn of each execution past its limit (a method of its own: no instance stays referenced
        from this thread between checks, so an unloaded model's memory goes as it unloads)."""
        with self._lock:
            instances = list(self._instances)
        for instance in instances:
            since = instance.since
            if since and since != instance.warned and now - since >= instance.warn_after:
                instance.warned = since
                _log.warning(
                    "model '%s' instance '%s': execute has been running for %.1f s (EXECUTE_WARN_SECS %g); "
                    "it holds the instance, and unloading the model or stopping the server waits for it. "
                    "An isolated model (EXECUTION_MODE process) can be stopped with EXECUTE_TIMEOUT_SECS",
                    instance._binding.model_name,
                    instance.name,
                    now - since,
                    instance.warn_after,
                )


BLOCKED = _BlockedExecutions()


class _LoopThread:
    """An asyncio event loop on a thread of its own, for ``async def execute`` models."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()
