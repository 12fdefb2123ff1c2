"""The stub process of an isolated Python model (``EXECUTION_MODE: process``): one per instance.

The server starts it with ``python -c BOOT ...`` (:data:`BOOT`): the server's own interpreter, or
the one of the model's ``EXECUTION_ENV_PATH``. It imports ``model.py`` with the same loader as the
in-process backend and runs ``execute`` through the same
:class:`~inferd_backend_python.instance.PythonInstance`, so ``pb_utils`` behaves the same. Its main
thread reads a batch from the socket, executes it and sends the results: no thread hand-off on the
way. Requests and responses cross :mod:`~inferd_backend_python.ipc` (tensors in shared memory). BLS
calls and ``is_cancelled()`` go to the server and wait for its reply; logging and custom metrics are
forwarded to the server too. The stub exits when the server closes the socket (or dies).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import itertools
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from inferd.api import RESCHEDULE, InferdError, InferRequest, InferResponse, settle_gc
from inferd_backend_python import ipc, pb_metrics, shm
from inferd_backend_python.instance import PythonInstance, run_auto_complete, start_model_object
from inferd_backend_python.loader import check_model_class, import_model_file
from inferd_backend_python.pb_request import CANCEL_QUERY, ModelBinding, bind
from inferd_backend_python.wire import decode_error, decode_outcome, decode_request, encode_outcome, encode_request

#: What the server runs: ``python -c BOOT <socket fd> <in ring fd>,<out ring fd>,<ring size> <server pid>
#: <inferd dir> <inferd_backend_python dir> <pb_utils dir>``.
#: It first asks the kernel to kill it when the server's thread that started it ends (the server
#: starts stubs from one thread that lives as long as it does: a server killed with SIGKILL leaves
#: no stub behind) and to hand it the orphans among the processes its model starts (a child
#: subreaper: the server ends them with the stub, :mod:`inferd_backend_python.proctree`), then
#: imports the server's own copies of these packages by path, so an execution environment needs
#: only numpy, and reports a failed import on the socket before anything else runs.
BOOT = """
import sys, os, ctypes, importlib.util
try:
    libc = ctypes.CDLL(None)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
if os.getppid() != int(sys.argv[3]):  # the server died before that
    raise SystemExit(0)
if sys.path and sys.path[0] == "":
    del sys.path[0]
fd, rings, dirs = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path + "/__init__.py", submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
try:
    load("inferd", dirs[0])
    load("inferd_backend_python", dirs[1])
    from inferd_backend_python import stub
except BaseException as exc:
    import marshal, socket
    socket.socket(fileno=fd).send(marshal.dumps((11, ("%s: %s" % (type(exc).__name__, exc), "import"), None)))
    raise SystemExit(3)
stub.main(fd, rings, load, dirs[2])
"""


#: glibc's mallopt parameters, and the values the stub sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_TRIM_THRESHOLD = 64 * 1024 * 1024
_MMAP_THRESHOLD = 32 * 1024 * 1024


def main(fd: int, rings: str, load: Callable[[str, str], None], pb_utils_dir: str) -> None:
    """Serve the server on the socket ``fd`` until it closes it or asks the stub to finish."""
    _keep_heap()
    load("triton_python_backend_utils", pb_utils_dir)
    in_fd, out_fd, size = (int(n) for n in rings.split(","))
    in_ring, out_ring = shm.Ring(in_fd, size), shm.Ring(out_fd, size)
    os.close(in_fd)
    os.close(out_fd)
    Stub(ipc.Channel(socket.socket(fileno=fd), out_ring, in_ring)).run()


#: How long ``execute`` runs before the readiness thread reads the socket for the main thread.
_HELP_AFTER_NS = 100_000_000


def _keep_heap() -> None:
    """Keep freed memory for reuse as a thread's malloc arena does. ``execute`` runs on the main
    thread, whose glibc arena gives the top of its heap back to the system once 2 MiB are free at
    its end: a model that allocates and frees a few MiB a request (``a + b`` on 1 MiB arrays) then
    takes a page fault per 4 KiB on every request, measured 3 ms instead of 0.15 ms here."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    except (OSError, AttributeError):  # not glibc
        pass


class _LogForwarder(logging.Handler):
    """Sends the model's log records to the server, which logs them with its own settings."""

    def __init__(self, channel: ipc.Channel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            self.channel.send(ipc.LOG, (record.levelno, record.name, message))
        except Exception:
            pass


class _Inbox:
    """The messages from the server, read by whichever thread waits for one: no reader thread.

    The main thread reads while it waits for its next batch, and runs the batch itself; a model
    thread that waits for a reply (a BLS response, an ``is_cancelled()`` answer) reads while the
    main thread is busy. One thread reads at a time; what it reads for others it files (a batch in
    ``jobs``, a reply under its call id) and wakes them. When the server closes the socket the stub
    exits.
    """

    def __init__(self, channel: ipc.Channel) -> None:
        self.channel = channel
        #: Batches (and None: finalize) for the main thread, in order.
        self.jobs: collections.deque[tuple[Any, Any] | None] = collections.deque()
        #: Replies by call id: a deque per call waiting for one.
        self.replies: dict[int, collections.deque[tuple[Any, Any]]] = {}
        #: The call ids of the server's readiness asks, for the thread that answers them.
        self.checks: collections.deque[int] = collections.deque()
        #: When the main thread's running ``execute`` began (monotonic ns; 0: none runs).
        self.executing_since = 0
        self._lock = threading.Lock()  # ``with`` on it directly: a Condition's own ``with`` is Python code
        self._ready = threading.Condition(self._lock)
        self._reading = False
        #: Threads waiting in ``_ready`` for what another thread reads (none: no notify to send).
        self._waiting = 0
        #: The readiness thread waits in ``_ready`` (woken only for what is filed for it).
        self._helper_waits = False

    def _main_stuck(self) -> bool:
        """The main thread has run one ``execute`` for over :data:`_HELP_AFTER_NS`."""
        since = self.executing_since
        return since != 0 and time.monotonic_ns() - since > _HELP_AFTER_NS

    def wait(self, filed: collections.deque[Any], helper: bool = False) -> None:
        """Return once ``filed`` holds something, reading messages meanwhile when no other thread is.

        A ``helper`` reads only while the main thread is stuck in a long ``execute``: a batch that
        comes when it is free is then read by the main thread itself, not handed over by another."""
        cond, lock = self._ready, self._lock
        with lock:
            reading = False
            while not filed:
                if not self._reading and (not helper or self._main_stuck()):
                    self._reading = reading = True
                    break
                if helper:  # woken for a readiness ask only, else it looks again after a while
                    self._helper_waits = True
                    try:
                        cond.wait(_HELP_AFTER_NS / 1e9)
                    finally:
                        self._helper_waits = False
                    continue
                self._waiting += 1
                try:
                    cond.wait()
                finally:
                    self._waiting -= 1
        while reading:
            message = None
            try:
                message = self.channel.recv()
            except shm.Malformed:
                pass
            finally:
                with lock:
                    if message is not None:
                        self._file(*message)
                    # keep reading: nothing for us yet
                    reading = not filed and message is not None and (not helper or self._main_stuck())
                    if not reading:
                        self._reading = False
                    if self._waiting or (self._helper_waits and self.checks):  # what was filed for them,
                        cond.notify_all()  # or the reading left to them
            if message is None:
                _exit(0)  # the server closed the socket: it is unloading us, or gone

    def _file(self, kind: int, body: Any, block: Any) -> None:
        if kind == ipc.EXEC:
            self.jobs.append((body, block))
        elif kind == ipc.REPLY:
            replies = self.replies.get(body[0])
            if replies is not None:
                replies.append((body, block))
        elif kind == ipc.FINALIZE:
            self.jobs.append(None)
        elif kind == ipc.IS_READY:
            self.checks.append(body)

    def next_job(self) -> tuple[Any, Any] | None:
        jobs = self.jobs
        if not jobs:
            self.wait(jobs)
        return jobs.popleft()

    def call(self, call_id: int) -> collections.deque[tuple[Any, Any]]:
        """Where the replies to call ``call_id`` will be filed; :meth:`forget` it when done."""
        replies: collections.deque[tuple[Any, Any]] = collections.deque()
        with self._ready:
            self.replies[call_id] = replies
        return replies

    def reply(self, replies: collections.deque[tuple[Any, Any]]) -> tuple[Any, Any]:
        """The next reply filed in ``replies`` (waiting for it)."""
        if not replies:
            self.wait(replies)
        return replies.popleft()

    def forget(self, call_id: int) -> None:
        with self._ready:
            self.replies.pop(call_id, None)


class _ServerClient:
    """The server's models, for the model's BLS calls: each call goes to the server and back."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub

    def _call(self, request: InferRequest, decoupled: bool) -> tuple[int, collections.deque[tuple[Any, Any]]]:
        call_id, replies = self._stub.new_call()
        tensors = shm.Tensors()
        item = encode_request(request, tensors)
        self._stub.channel.send(ipc.BLS_CALL, (call_id, decoupled, item), tensors)
        return call_id, replies

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        inbox = self._stub.inbox
        call_id, replies = self._call(request, False)
        try:
            (_, what, payload), block = inbox.reply(replies)
        finally:
            inbox.forget(call_id)
        if what == "raise":
            raise decode_error(payload)
        return decode_outcome(payload, block)  # type: ignore[return-value]

    def stream_from_thread(self, request: InferRequest) -> Iterator[InferResponse | InferdError]:
        inbox = self._stub.inbox
        call_id, replies = self._call(request, True)
        (_, what, payload), _ = inbox.reply(replies)
        if what == "raise":
            inbox.forget(call_id)
            raise decode_error(payload)
        return self._items(call_id, replies)

    def _items(
        self, call_id: int, replies: collections.deque[tuple[Any, Any]]
    ) -> Iterator[InferResponse | InferdError]:
        inbox = self._stub.inbox
        try:
            while True:
                (_, what, payload), block = inbox.reply(replies)
                if what == "end":
                    return
                yield decode_outcome(payload, block)  # type: ignore[misc]
        finally:
            inbox.forget(call_id)


class Stub:
    """The stub's state: the control channel, its inbox, the instance."""

    def __init__(self, channel: ipc.Channel) -> None:
        self.channel = channel
        self.inbox = _Inbox(channel)
        self.instance: PythonInstance | None = None
        self._ids = itertools.count(1)
        self._iterative = False

    def new_call(self) -> tuple[int, collections.deque[tuple[Any, Any]]]:
        call_id = next(self._ids)
        return call_id, self.inbox.call(call_id)

    def run(self) -> None:
        try:
            first = self.channel.recv()
        except shm.Malformed:
            first = None
        if first is None:
            return
        kind, body, _ = first
        logging.getLogger().addHandler(_LogForwarder(self.channel))
        if kind == ipc.AUTOCOMPLETE:
            self._reply(lambda: self._autocomplete(*body))
        elif kind == ipc.INIT and self._reply(lambda: self._init(body)):
            settle_gc()  # as the server does once started: fewer young collections, the model frozen
            self._work()
        # Done: the server ends this process with the processes the model started, which it finds
        # below this one (an exit now would hand them to init). It may close the socket instead.
        _flush()
        self.inbox.wait(collections.deque())

    def _reply(self, work: Callable[[], Any]) -> bool:
        """Run ``work``; send READY with its result or FAILED with the error. True when it worked."""
        try:
            result = work()
        except InferdError as exc:
            self.channel.send(ipc.FAILED, (exc.message, exc.kind.value))
            return False
        except BaseException as exc:
            self.channel.send(ipc.FAILED, (f"{type(exc).__name__}: {exc}", "INTERNAL"))
            return False
        self.channel.send(ipc.READY, result)
        return True

    def _init(self, settings: dict[str, Any]) -> tuple[int, bool]:
        logging.getLogger().setLevel(settings["log_level"])
        if settings.get("cpus"):
            os.sched_setaffinity(0, settings["cpus"])
        name, version, path = settings["name"], settings["version"], Path(settings["path"])
        model_dir = Path(settings["model_dir"])
        binding = ModelBinding(name, version, model_dir, settings["decoupled"], _ServerClient(self))
        pb_metrics.FAMILIES.model_loaded(binding)
        pb_metrics.FAMILIES.mirror = self._metric
        module = import_model_file(name, version, path, model_dir)
        cls = check_model_class(module, f"model '{name}'", path)
        args = settings["args"]
        obj = start_model_object(cls, args, binding, path)
        self._iterative = bool(settings["iterative"])
        self.instance = PythonInstance(binding, self._iterative, obj, args["model_instance_name"])
        if self.instance.has_is_ready:
            threading.Thread(target=self._answer_checks, name="inferd-stub-is-ready", daemon=True).start()
        return (os.getpid(), self.instance.has_is_ready)

    def _answer_checks(self) -> None:
        """Answer the server's readiness asks with the model's ``is_ready``. The main thread reads
        them while it waits for batches; this thread reads the socket while the main thread is
        stuck in a long ``execute``, so that the answer is not held up for its length."""
        instance, checks = self.instance, self.inbox.checks
        assert instance is not None
        while True:
            self.inbox.wait(checks, helper=True)
            call_id = checks.popleft()
            try:
                ready, error = instance.user_ready(), None
            except Exception as exc:
                ready, error = False, f"{type(exc).__name__}: {exc}"
            self.channel.send(ipc.READINESS, (call_id, ready, error))

    def _autocomplete(self, config: dict[str, Any], name: str, path: str, model_dir: str, version: str) -> Any:
        from inferd_backend_python.loader import forget_package

        module = import_model_file(name, version, Path(path), Path(model_dir))
        try:
            hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
            if hook is None:
                return None
            bind(ModelBinding(name, "", Path(model_dir), False))
            return run_auto_complete(config, hook, name, path)
        finally:
            forget_package(module.__name__.rpartition(".")[0])

    def _metric(self, *operation: Any) -> None:
        with contextlib.suppress(OSError):
            self.channel.send(ipc.METRIC, operation)

    def _work(self) -> None:
        """Run the batches the server sends, one at a time, on this (the main) thread."""
        instance = self.instance
        assert instance is not None
        send = self.channel.send
        inbox = self.inbox
        next_job = inbox.next_job
        cancelled = self._cancelled
        iterative = self._iterative
        free_ns = 0  # when the batch before ended: a batch that came earlier waited for it
        while (job := next_job()) is not None:
            (batch_id, items), block = job
            del job
            requests = []
            for index, item in enumerate(items):
                sender = self._sender(batch_id, index) if item[6] else None
                query = functools.partial(cancelled, batch_id, index)
                requests.append(decode_request(item, block, sender, {CANCEL_QUERY: query}))
            del block  # the input arrays keep the mapping alive as long as the model holds them
            inbox.executing_since = time.monotonic_ns()
            try:
                results = instance.execute(requests)
            except BaseException as exc:  # SystemExit and the like: fail the batch, keep serving
                error = InferdError(
                    f"Failed to process the request(s) for model '{requests[0].model_name}', message: "
                    f"{type(exc).__name__}: {exc}"
                )
                results = [] if requests[0].response_sender is not None else [error] * len(requests)
                for request in requests:
                    if request.response_sender is not None:
                        request.response_sender(error, True)
            tensors = shm.Tensors()
            encoded = [encode_outcome(r, tensors) for r in results]
            rescheduled = [i for i, r in enumerate(requests) if r.context.get(RESCHEDULE)] if iterative else ()
            # before the send: once it is sent the server may hand over a batch that never waited (and this
            # thread may not run again before it does)
            ended_ns = time.monotonic_ns()
            inbox.executing_since = 0
            send(ipc.RESULT, (batch_id, encoded, rescheduled, free_ns), tensors)
            free_ns = ended_ns
        instance.close()
        send(ipc.FINALIZED, None)

    def _cancelled(self, batch_id: int, index: int) -> bool:
        """Ask the server whether request ``index`` of batch ``batch_id`` was cancelled (as Triton's stub does)."""
        call_id, replies = self.new_call()
        try:
            self.channel.send(ipc.CANCELLED, (call_id, batch_id, index))
            (_, _, answer), _ = self.inbox.reply(replies)
        finally:
            self.inbox.forget(call_id)
        return bool(answer)

    def _sender(self, batch_id: int, index: int) -> Callable[[InferResponse | InferdError | None, bool], None]:
        def send(outcome: InferResponse | InferdError | None, final: bool) -> None:
            tensors = shm.Tensors()
            payload = encode_outcome(outcome, tensors)
            self.channel.send(ipc.SEND, (batch_id, index, payload, bool(final)), tensors)

        return send


def _exit(code: int) -> None:
    """Leave now, whatever threads the model started (they would keep a normal exit waiting)."""
    _flush()
    os._exit(code)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
