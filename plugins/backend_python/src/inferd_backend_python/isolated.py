"""Isolated Python models: each instance in a stub process of its own, supervised by the server.

A model whose config sets ``parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }``
(or an ``EXECUTION_ENV_PATH``) is served by :class:`ProcessModel`. Each instance starts a stub
(:mod:`inferd_backend_python.stub`) with the server's interpreter, or the environment's, and talks
to it over :mod:`~inferd_backend_python.ipc`. A stub that dies (signal, exit, killed for its memory
limit or a timed-out ``execute``) fails the requests it held with the cause, and is restarted with
a growing delay; the model reports itself not serving meanwhile (``Model.not_serving``). After
``RESTART_LIMIT`` crashes within ``RESTART_WINDOW_SECS`` the instance stays down and the model
UNAVAILABLE, with the reason. Other models are not affected.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from inferd.api import (
    RESCHEDULE,
    SOURCES,
    ErrorKind,
    InferdError,
    InferRequest,
    InferResponse,
    Instance,
    InstanceSpec,
    InternalError,
    InvalidArgument,
    Model,
    ModelClient,
    ModelLoadContext,
    Started,
    Unavailable,
)
from inferd_backend_python import env as environments
from inferd_backend_python import ipc, proctree
from inferd_backend_python.archive import Limits
from inferd_backend_python.instance import instance_args
from inferd_backend_python.pb_metrics import FAMILIES, Metric, MetricFamily
from inferd_backend_python.pb_request import ModelBinding, bind
from inferd_backend_python.readiness import Probe, first_problem
from inferd_backend_python.stub import BOOT
from inferd_backend_python.stub_logs import LINE_CHARS, SUMMARY_S, LogBudget
from inferd_backend_python.wire import decode_outcome, decode_request, encode_error, encode_outcome, encode_request

if TYPE_CHECKING:
    from inferd.config import ModelConfig

_log = logging.getLogger("inferd.contracts.backend.python")

#: How long a stub may take to start and run ``initialize`` (Triton's default stub timeout is 30 s;
#: a model importing a large framework needs longer on a busy machine).
START_TIMEOUT_S = 300.0
#: How long ``finalize`` may take at unload before the stub is killed.
FINALIZE_TIMEOUT_S = 30.0
#: How long the processes a model started have, once asked to stop (SIGTERM) at unload, before they
#: are killed with their stub (:mod:`inferd_backend_python.proctree`).
DESCENDANTS_GRACE_S = 2.0
#: Restart delays: the first after this long, doubling with each crash in the window, at most _MAX.
_BACKOFF_S = 0.25
_BACKOFF_MAX_S = 10.0
_MiB = 1024 * 1024


# --- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How an isolated model's instances run, from its config's ``parameters``."""

    env_path: Path | None = None
    env_limits: Limits = Limits()
    execute_timeout_s: float | None = None
    memory_limit: int | None = None
    cpus: tuple[int, ...] = ()
    restart_limit: int = 5
    restart_window_s: float = 60.0


def _parameter(config: ModelConfig, key: str) -> str | None:
    param = config.parameters.get(key) if key in config.parameters else None
    return param.string_value.strip() if param is not None else None


def isolation_settings(
    config: ModelConfig, model_dir: Path, name: str, env_limits: Limits | None = None
) -> Settings | None:
    """The isolation settings of a model, or None when it runs in the server process."""
    mode = _parameter(config, "EXECUTION_MODE")
    env_value = _parameter(config, "EXECUTION_ENV_PATH")
    label = f"model '{name}'"
    if mode not in (None, "", "in_process", "process"):
        raise InvalidArgument(f"{label}: parameter EXECUTION_MODE is '{mode}'; expected 'in_process' or 'process'")
    if mode == "in_process" and env_value:
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH needs EXECUTION_MODE 'process' (or no EXECUTION_MODE)")
    if mode != "process" and not env_value:
        return None
    return Settings(
        env_path=environments.resolve(env_value, model_dir) if env_value else None,
        env_limits=env_limits or Limits(),
        execute_timeout_s=_number(config, "EXECUTE_TIMEOUT_SECS", label, float) or None,
        memory_limit=_size(_parameter(config, "MEMORY_LIMIT"), label),
        cpus=_cpus(_parameter(config, "CPU_AFFINITY"), label),
        restart_limit=int(_number(config, "RESTART_LIMIT", label, int, 5)),
        restart_window_s=float(_number(config, "RESTART_WINDOW_SECS", label, float, 60.0)),
    )


def _number(config: ModelConfig, key: str, label: str, kind: type, default: float = 0.0) -> float:
    text = _parameter(config, key)
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if value < 0 or (kind is int and value < 1):
        raise InvalidArgument(f"{label}: parameter {key} is '{text}'; expected a positive {kind.__name__}")
    return value


def _size(text: str | None, label: str) -> int | None:
    if not text:
        return None
    match = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text, re.IGNORECASE)
    if match is None or int(match.group(1)) == 0:
        raise InvalidArgument(
            f"{label}: parameter MEMORY_LIMIT is '{text}'; expected bytes, or a number with K, M or G"
        )
    return int(match.group(1)) * 1024 ** " KMG".index((match.group(2) or " ").upper())


def _cpus(text: str | None, label: str) -> tuple[int, ...]:
    if not text:
        return ()
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise InvalidArgument(
            f"{label}: parameter CPU_AFFINITY is '{text}'; expected CPU numbers like '0,2-3'"
        ) from None
    unknown = cpus - os.sched_getaffinity(0)
    if unknown:
        raise InvalidArgument(f"{label}: parameter CPU_AFFINITY names CPUs this server may not use: {sorted(unknown)}")
    return tuple(sorted(cpus))


# --- launching stubs --------------------------------------------------------------------------


def _package_dirs() -> list[str]:
    import triton_python_backend_utils

    import inferd
    import inferd_backend_python

    return [str(Path(str(m.__file__)).parent) for m in (inferd, inferd_backend_python, triton_python_backend_utils)]


_spawner: tuple[int, ThreadPoolExecutor] | None = None
_spawner_lock = threading.Lock()


def _spawn_thread() -> ThreadPoolExecutor:
    """The one thread of this process that starts stubs. It lives as long as the process: a stub
    asks the kernel to kill it when the thread that started it ends (``PR_SET_PDEATHSIG``), so a
    server that dies, even by SIGKILL, leaves no stub behind."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():  # a forked worker makes its own
            _spawner = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="inferd-python-spawner"))
        return _spawner[1]


@dataclass(frozen=True)
class Launcher:
    """How to start a model's stubs: the interpreter and its environment variables."""

    python: str
    variables: dict[str, str] | None
    env_source: str | None
    environment: environments.Environment | None = None

    @classmethod
    def for_settings(cls, settings: Settings, label: str) -> Launcher:
        """The server's interpreter, or the environment's (an archive is unpacked: :meth:`release`)."""
        if settings.env_path is None:
            return cls(sys.executable, None, None)
        found = environments.prepare(settings.env_path, label, settings.env_limits)
        return cls(found.python, found.variables, found.source, found)

    def release(self, linger_s: float = 0.0) -> None:
        """Done starting stubs: an unpacked environment's directory goes with its last user."""
        if self.environment is not None:
            environments.release(self.environment, linger_s)

    def spawn(self, on_backlog: Callable[[], None] | None = None) -> tuple[subprocess.Popen, ipc.Channel]:
        """A new stub and the server's end of its channel (non-blocking when ``on_backlog`` is given)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            to_stub, to_fd = ipc.Ring.create()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        try:
            from_stub, from_fd = ipc.Ring.create()
        except BaseException:
            os.close(to_fd)
            ours.close()
            theirs.close()
            raise
        rings = f"{to_fd},{from_fd},{ipc.Ring.SIZE}"
        command = [self.python, "-c", BOOT, str(theirs.fileno()), rings, str(os.getpid()), *_package_dirs()]
        try:
            started = _spawn_thread().submit(
                subprocess.Popen,
                command,
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), to_fd, from_fd),
                env=self.variables,
                process_group=0,  # a terminal's Ctrl-C goes to the server, which stops its stubs
            )
            proc = started.result()
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(to_fd)
            os.close(from_fd)
        return proc, ipc.Channel(ours, to_stub, from_stub, on_backlog)

    def import_failure(self, detail: str, label: str) -> InferdError:
        if self.env_source is None:
            return InternalError(f"{label}: the stub process could not start: {detail}")
        return InternalError(
            f"{label}: the Python of EXECUTION_ENV_PATH '{self.env_source}' ({self.python}) cannot run the "
            f"python backend stub: {detail}; the environment needs Python >= 3.10 with numpy installed"
        )


def autocomplete(
    launcher: Launcher, config: dict[str, Any], name: str, path: Path, model_dir: Path, version: str
) -> dict[str, Any] | None:
    """Run ``auto_complete_config`` in a short-lived stub; the completed config (None: no hook)."""
    proc, channel = launcher.spawn()
    label = f"model '{name}'"
    budget = LogBudget(name, version, functools.partial(STATS.logged, name, version))
    try:
        channel.send(ipc.AUTOCOMPLETE, (config, name, str(path), str(model_dir), version))
        while (message := channel.recv()) is not None:
            kind, body, _ = message
            if kind == ipc.READY:
                return body
            if kind == ipc.FAILED:
                raise _failure(body, launcher, label)
            if kind == ipc.LOG:
                budget.log(*_log_record(body))
        raise InternalError(f"{label}: the stub running auto_complete_config {_exit_cause(proc.wait(), None)}")
    except ipc.Malformed as exc:
        raise InternalError(f"{label}: the stub running auto_complete_config sent a malformed message: {exc}") from None
    finally:
        proctree.end(proc)  # before the socket closes: the stub would leave, its descendants left behind
        channel.close()
        proc.wait()
        budget.report()


def _failure(body: Sequence[Any], launcher: Launcher, label: str) -> InferdError:
    message, kind = body
    if kind == "import":
        return launcher.import_failure(message, label)
    return InferdError(message, ErrorKind(kind))


def _log_record(body: Any) -> tuple[int, str, str]:
    """A LOG message's (level, logger name, text), checked."""
    if not (isinstance(body, tuple | list) and len(body) == 3):
        raise ipc.Malformed("a log record that is not (level, logger name, text)")
    level, name, message = body
    if type(level) is not int or type(name) is not str or type(message) is not str:
        raise ipc.Malformed("a log record that is not (level, logger name, text)")
    return level, name, message


def _exit_cause(returncode: int, reason: str | None) -> str:
    """``killed by signal 11 (SIGSEGV)``, ``exited with code 3``, or the reason the server killed it."""
    if reason:
        return reason
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        text = f"was killed by signal {-returncode} ({name})"
        if -returncode == signal.SIGKILL:
            text += ", possibly by the kernel's out-of-memory killer"
        return text
    return f"exited with code {returncode}"


def _cause_kind(returncode: int, kind: str | None) -> str:
    return kind or ("signal" if returncode < 0 else "exit")


# --- one stub process -------------------------------------------------------------------------

#: Requests whose tensors add up to more than this are copied to the stub from a worker thread,
#: not on the event loop.
_LOOP_COPY_LIMIT = 256 * 1024
#: Of such large batches, at most this many are in the stub's hands at once (the next waits in the
#: server, with every batch after it): deep pipelining pays for small requests, whose cost is the
#: hand-over, but eight large ones copied at once cost ~10% more CPU at c=8 here, for no gain.
_LARGE_IN_FLIGHT = 2
#: Messages the event loop reads from one stub before it serves others (then it comes back).
_READ_BATCH = 64


class _Batch:
    """Requests handed to a stub: its future is done once ``execute`` returned (or the stub died)."""

    __slots__ = ("future", "held", "large", "open", "requests", "returned", "sent_ns")

    def __init__(self, requests: Sequence[InferRequest], future: asyncio.Future, decoupled: bool) -> None:
        self.requests = requests
        self.future = future
        #: Its ``execute`` returned (the stub sent its results), or it failed.
        self.returned = False
        #: When it was handed to the stub (0: not yet, it waits in the server for room), whether
        #: it waited for room first, and whether it is a large one.
        self.sent_ns = 0
        self.held = False
        self.large = False
        #: Decoupled: the requests whose final response has not been sent yet.
        self.open = set(range(len(requests))) if decoupled else _NONE


_NONE: set[int] = set()
_bls_pool: ThreadPoolExecutor | None = None
_bls_lock = threading.Lock()


def _bls_threads() -> ThreadPoolExecutor:
    global _bls_pool
    with _bls_lock:
        if _bls_pool is None:
            _bls_pool = ThreadPoolExecutor(64, thread_name_prefix="inferd-python-bls")
        return _bls_pool


class Stub:
    """One running stub process: its channel, read and written by the server's event loop, and
    the batches it holds.

    Everything about batches happens on the loop: ``submit`` (from the instance's ``execute``)
    sends a batch, the loop reads the stub's socket as soon as it is readable and resolves the
    batch's future with the results: no thread between the two. A message that breaks the
    protocol gets the stub killed ("sent a malformed message"), as does one that leaves the
    server's messages unread. Its death, seen as the socket closing, fails what it held.
    """

    def __init__(
        self, owner: ProcessInstance, proc: subprocess.Popen, channel: ipc.Channel, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.owner = owner
        self.proc = proc
        self.pid = proc.pid
        self.channel = channel
        self.loop = loop
        self.rss = 0
        self._fd = channel.sock.fileno()
        self._decoupled = owner.model.decoupled
        self._timeout = owner.model.settings.execute_timeout_s
        self._pending: dict[int, _Batch] = {}  # on the loop only
        #: Batches sent whose ``execute`` has not returned yet: the stub runs them one after the
        #: other, in the order they reach it (``pipeline_depth``: the next one waits there).
        self._executing = 0
        #: Batches not sent yet (a large one waiting for room, and those after it, in order).
        self._held: collections.deque[tuple[int, Sequence[InferRequest], bool]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._ids = itertools.count(1)
        self._dead = False
        self._ignoring = False
        self._lock = threading.Lock()
        self._kill_reason: str | None = None
        self._kill_kind: str | None = None
        self._started = threading.Event()
        self._start_error: InferdError | None = None
        self._finalized = threading.Event()
        self._gone = threading.Event()
        self._families: dict[int, MetricFamily] = {}
        self._metrics: dict[int, Metric] = {}
        self._log_budget = owner.model.log_budget
        #: The model defines ``is_ready`` (the stub says so once ``initialize`` returned).
        self.has_is_ready = False
        self._checks: dict[int, asyncio.Future[bool]] = {}  # readiness asks awaiting the stub, on the loop

    @classmethod
    def start(cls, owner: ProcessInstance) -> Stub:
        """Start a stub and run the model's ``initialize`` in it; raises when that fails (blocking:
        not on the loop)."""
        model = owner.model
        holder: list[Stub] = []
        proc, channel = model.launcher.spawn(lambda: holder[0].wake_writer())
        channel.block_limit = model.settings.memory_limit
        stub = cls(owner, proc, channel, model.loop)
        holder.append(stub)
        model.loop.call_soon_threadsafe(model.loop.add_reader, stub._fd, stub._readable)
        try:
            channel.send(ipc.INIT, model.init_settings(owner.spec))
        except OSError:
            pass  # it died already: the reader says how
        if not stub._started.wait(START_TIMEOUT_S):
            stub.kill(f"did not finish initialize within {START_TIMEOUT_S:g} s", "timeout")
            stub._started.wait()
        if stub._start_error is not None:
            stub.kill(None, None)
            raise stub._start_error
        WATCHDOG.add(stub)
        return stub

    # -- requests (on the loop) --

    def submit(self, requests: Sequence[InferRequest]) -> asyncio.Future | None:
        """Hand a batch to the stub: a future of its results (None: the stub is dead already)."""
        if self._dead:
            return None
        batch_id = next(self._ids)
        future = self.loop.create_future()
        self._pending[batch_id] = batch = _Batch(requests, future, self._decoupled)
        nbytes = 0
        for request in requests:
            for tensor in request.inputs.values():
                nbytes += tensor.data.nbytes
        large = nbytes > _LOOP_COPY_LIMIT
        if self._held or (large and self._large_waits()):
            self._held.append((batch_id, requests, large))
            batch.held = True
        else:
            self._hand_over(batch_id, requests, large)
        return future

    def _large_waits(self) -> bool:
        """Whether a large batch must wait: as many are in the stub's hands already."""
        large = 0
        for batch in self._pending.values():
            if batch.large and not batch.returned:
                large += 1
        return large >= _LARGE_IN_FLIGHT

    def _hand_over(self, batch_id: int, requests: Sequence[InferRequest], large: bool) -> None:
        batch = self._pending[batch_id]
        batch.large, batch.sent_ns = large, time.monotonic_ns()
        if large:
            self.loop.run_in_executor(None, self._send_batch, batch_id, requests, True)
        else:
            self._send_batch(batch_id, requests, False)
        self._executing += 1
        if self._timeout is not None and self._executing == 1:
            self._arm()

    def _release_held(self) -> None:
        """Send the batches that waited, in order, as far as there is room for the large ones."""
        held = self._held
        while held and not self._dead:
            batch_id, requests, large = held[0]
            if large and self._large_waits():
                return
            held.popleft()
            if batch_id in self._pending:
                self._hand_over(batch_id, requests, large)

    def _arm(self) -> None:
        """Kill the stub unless the batch it runs now returns within ``EXECUTE_TIMEOUT_SECS``
        (re-armed as each batch returns while others wait behind it)."""
        timeout = self._timeout or 0.0
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(
            timeout, self.kill, f"did not return from execute within {timeout:g} s (EXECUTE_TIMEOUT_SECS)", "timeout"
        )

    def _returned(self, batch: _Batch) -> None:
        """``batch`` is out of the stub's hands (its ``execute`` returned, or it failed): time the next one."""
        if batch.returned:
            return
        batch.returned = True
        if not batch.sent_ns:  # failed while it waited in the server
            return
        self._executing -= 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            if self._executing and not self._dead:
                self._arm()
        if self._held:
            self._release_held()

    def _send_batch(self, batch_id: int, requests: Sequence[InferRequest], wait: bool) -> None:
        """Send a batch (``wait``: from a worker thread, which may wait for the socket)."""
        try:
            tensors = ipc.Tensors()
            items = [encode_request(r, tensors) for r in requests]
        except Exception as exc:
            error = InternalError(
                f"{self.owner.label}: the batch cannot be sent to its stub: {type(exc).__name__}: {exc}"
            )
            if wait:
                self.loop.call_soon_threadsafe(self._drop_batch, batch_id, error)
            else:
                self._drop_batch(batch_id, error)
            return
        self._send(ipc.EXEC, (batch_id, items), tensors, wait)

    def _drop_batch(self, batch_id: int, error: InferdError) -> None:
        batch = self._pending.pop(batch_id, None)
        if batch is not None:
            self._fail_batch(batch, error)

    def _send(self, kind: int, body: Any, tensors: ipc.Tensors | None = None, wait: bool = True) -> None:
        try:
            self.channel.send(kind, body, tensors, wait=wait)
        except ipc.Backlogged as exc:
            self.kill(f"stopped reading the server's messages ({exc})", "protocol")
        except OSError:
            pass  # it died: the loop sees the socket close and fails what it held

    def wake_writer(self) -> None:
        """Some messages wait for the stub to read (any thread): the loop sends them as the socket
        takes them."""
        try:
            self.loop.call_soon_threadsafe(self._backlogged)
        except RuntimeError:  # the loop is closed: the server is stopping
            pass

    def _backlogged(self) -> None:
        if not self._dead:
            self.loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            done = self.channel.flush()
        except OSError:
            done = True
        if done:
            self.loop.remove_writer(self._fd)

    # -- what the stub sends (on the loop) --

    def _readable(self) -> None:
        channel = self.channel
        for _ in range(_READ_BATCH):
            try:
                message = channel.recv()
            except BlockingIOError:
                return
            except ipc.Malformed as exc:
                self._violation(exc)
                continue
            if message is None:
                self._closed()
                return
            if not self._ignoring:
                kind, body, block = message
                del message
                try:
                    if kind == ipc.RESULT:
                        self._result(body, block)
                    else:
                        self._dispatch(kind, body, block)
                except Exception as exc:
                    self._violation(exc)
                del body, block
            if not channel.waiting():
                return

    def _violation(self, exc: Exception) -> None:
        if self._ignoring:
            return
        self._ignoring = True
        reason = f"sent a malformed message ({type(exc).__name__}: {exc})"
        _log.error("%s: its stub (pid %d) %s; killing it", self.owner.label, self.pid, reason)
        self.kill(reason, "protocol")

    def _dispatch(self, kind: int, body: Any, block: ipc.Block) -> None:
        if kind == ipc.SEND:
            self._send_response(body, block)
        elif kind == ipc.CANCELLED:
            call_id, batch_id, index = body
            batch = self._pending.get(batch_id)
            cancelled = batch is not None and batch.requests[index].cancelled
            self._send(ipc.REPLY, (call_id, "cancelled", bool(cancelled)), None, False)
        elif kind == ipc.BLS_CALL:
            _bls_threads().submit(self._bls, body, block)
        elif kind == ipc.LOG:
            self._log(body)
        elif kind == ipc.METRIC:
            self._metric(body)
        elif kind == ipc.READINESS:
            self._readiness(*body)
        elif kind == ipc.READY:
            self.has_is_ready = isinstance(body, tuple) and len(body) == 2 and body[1] is True
            self._started.set()
        elif kind == ipc.FAILED:
            self._start_error = _failure(body, self.owner.model.launcher, self.owner.label)
            self._started.set()
        elif kind == ipc.FINALIZED:
            self._finalized.set()
        else:
            raise ipc.Malformed(f"a message of unknown kind {kind}")

    def ask_ready(self) -> asyncio.Future[bool]:
        """Ask the stub for the model's ``is_ready`` answer (on the loop); its future."""
        future: asyncio.Future[bool] = self.loop.create_future()
        if self._dead:
            future.set_exception(InternalError(f"Stub process '{self.owner.name}' is not healthy."))
            return future
        call_id = next(self._ids)
        self._checks[call_id] = future
        self._send(ipc.IS_READY, call_id, None, False)
        return future

    def _readiness(self, call_id: int, ready: bool, error: str | None) -> None:
        future = self._checks.pop(call_id, None)
        if future is None:
            raise ipc.Malformed(f"a readiness answer to {call_id!r}, which it was not asked")
        if not future.done():
            if error is not None:
                future.set_exception(InternalError(str(error)))
            else:
                future.set_result(ready is True)

    def _result(self, body: Any, block: ipc.Block) -> None:
        batch_id, encoded, rescheduled, free_ns = body
        batch = self._pending.get(batch_id)
        if batch is None:
            raise ipc.Malformed(f"the results of batch {batch_id!r}, which it does not hold")
        if batch.returned:
            raise ipc.Malformed(f"the results of batch {batch_id!r} twice")
        if type(free_ns) is not int:
            raise ipc.Malformed(f"the results of batch {batch_id!r} with a start time of {free_ns!r}")
        self._returned(batch)
        results = [decode_outcome(item, block) for item in encoded]
        for index in rescheduled:
            if not (type(index) is int and 0 <= index < len(batch.requests)):
                raise ipc.Malformed(f"request {index!r} of a batch of {len(batch.requests)} to reschedule")
            batch.requests[index].context[RESCHEDULE] = True
        if not batch.open:
            del self._pending[batch_id]
        if not batch.future.done():
            # it could start once the stub ended the batch before (or once sent, if it waited in the server
            # for room): the wait behind other batches is queue time (core's runner bounds it by its end)
            start = free_ns if free_ns > batch.sent_ns else batch.sent_ns if batch.held else 0
            batch.future.set_result(Started(results, start) if start else results)

    def _send_response(self, body: Any, block: ipc.Block) -> None:
        batch_id, index, payload, final = body
        batch = self._pending.get(batch_id)
        if batch is None or index not in batch.open:
            return
        outcome = decode_outcome(payload, block)
        if final:
            batch.open.discard(index)
            if not batch.open and batch.future.done():
                del self._pending[batch_id]
        sender = batch.requests[index].response_sender
        if sender is not None:
            sender(outcome, bool(final))

    def _log(self, body: Any) -> None:
        """A log record of the model: logged by the server within the model's log budget."""
        budget = self._log_budget
        if not budget.log(*_log_record(body)) and budget.dropped == 1:
            self.loop.call_later(SUMMARY_S, budget.report)

    def _bls(self, body: Any, block: ipc.Block) -> None:
        """A BLS call of the model: run through the server's in-process path, the reply sent back."""
        try:
            call_id, decoupled, item = body
            request = decode_request(item, block)
        except Exception as exc:
            self.loop.call_soon_threadsafe(self._violation, exc)
            return
        del block
        models: ModelClient | None = self.owner.model.models
        try:
            if models is None:
                raise Unavailable(
                    f"cannot run a BLS request on model '{request.model_name}': this model is not running inside an "
                    "inferd server"
                )
            if not decoupled:
                response = models.infer_from_thread(request)
                self._reply(call_id, "ok", response)
                return
            items = models.stream_from_thread(request)
        except Exception as exc:
            self._send(ipc.REPLY, (call_id, "raise", encode_error(exc)))
            return
        self._send(ipc.REPLY, (call_id, "started", None))
        try:
            for outcome in items:
                self._reply(call_id, "item", outcome)
        except Exception as exc:
            self._reply(call_id, "item", InferdError(f"{type(exc).__name__}: {exc}", ErrorKind.INTERNAL))
        self._send(ipc.REPLY, (call_id, "end", None))

    def _reply(self, call_id: int, what: str, outcome: InferResponse | InferdError) -> None:
        tensors = ipc.Tensors()
        payload = encode_outcome(outcome, tensors)
        self._send(ipc.REPLY, (call_id, what, payload), tensors)

    def _metric(self, body: Sequence[Any]) -> None:
        """A custom-metric change in the stub, applied to the server's copy (what ``/metrics`` shows)."""
        operation = body[0]
        if operation == "op":
            metric = self._metrics.get(body[1])
            if metric is not None:
                getattr(metric, body[2])(body[3])
            return
        bind(self.owner.model.binding)
        try:
            if operation == "family":
                _, key, name, description, kind = body
                self._families[key] = MetricFamily(name, description, kind)
            elif operation == "metric":
                _, key, family_key, labels, buckets = body
                family = self._families.get(family_key)
                if family is not None:
                    self._metrics[key] = family.Metric(labels, buckets or None)
        except Exception as exc:
            _log.error("model '%s': custom metric of its stub not exported: %s", self.owner.model.name, exc)

    # -- death --

    def kill(self, reason: str | None, kind: str | None, grace: float = 0.0) -> None:
        """Kill the stub and every process its model started (SIGKILL; with ``grace``, those
        processes get SIGTERM and that long first: blocking, not on the loop); ``reason`` is what
        its requests and the model's state will say."""
        with self._lock:
            if self._kill_reason is None:
                self._kill_reason, self._kill_kind = reason, kind
        proctree.end(self.proc, grace)

    def _closed(self) -> None:
        """The socket closed (on the loop): the stub is gone. Stop reading; a thread waits for it."""
        self._dead = True
        self.loop.remove_reader(self._fd)
        self.loop.remove_writer(self._fd)
        threading.Thread(target=self._reap, name=f"inferd-reap-{self.pid}", daemon=True).start()

    def _reap(self) -> None:
        """Wait for the process, then tell the instance and fail what the stub held."""
        self.channel.close()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # it closed the socket but lives on: end it
            proctree.end(self.proc)
            code = self.proc.wait()
        WATCHDOG.remove(self)
        with self._lock:
            reason, kind = self._kill_reason, self._kill_kind
        cause = _exit_cause(code, reason)
        owner = self.owner
        if not self._started.is_set():
            self._start_error = self._start_error or InternalError(
                f"{owner.label}: its stub process {cause} while loading"
            )
            self._started.set()
            self._gone.set()
            return
        self._finalized.set()
        # first: once a client hears of the crash, the model says so
        owner.stub_died(self, cause, _cause_kind(code, kind))
        if owner.closing:
            error: InferdError = Unavailable(f"{owner.label} was unloaded while the request ran")
        else:
            error = InternalError(
                f"Failed to process the request(s) for model '{owner.model.name}', message: Stub process "
                f"'{owner.name}' is not healthy.; it {cause} (pid {self.pid})"
            )
        try:
            self.loop.call_soon_threadsafe(self._fail, error)
        except RuntimeError:  # the loop is closed: the server is stopping
            self._gone.set()

    def _fail(self, error: InferdError) -> None:
        """Fail every request the dead stub held (on the loop)."""
        pending, self._pending = self._pending, {}
        self._held.clear()
        checks, self._checks = self._checks, {}
        for future in checks.values():
            if not future.done():
                future.set_exception(InternalError(f"Stub process '{self.owner.name}' is not healthy."))
        for batch in pending.values():
            self._fail_batch(batch, error)
        self._gone.set()

    def _fail_batch(self, batch: _Batch, error: InferdError) -> None:
        self._returned(batch)
        if not batch.future.done():
            batch.future.set_result([] if self._decoupled else [error] * len(batch.requests))
        for index in sorted(batch.open):
            sender = batch.requests[index].response_sender
            if sender is not None:
                sender(error, True)

    def finalize(self) -> None:
        """Ask the stub to run ``finalize`` and exit; kill it if it takes too long (blocking)."""
        self._send(ipc.FINALIZE, None)
        if not self._finalized.wait(FINALIZE_TIMEOUT_S):
            _log.warning(
                "%s: finalize did not return within %g s; killing its stub", self.owner.label, FINALIZE_TIMEOUT_S
            )
        self.kill("was unloaded", "unload", DESCENDANTS_GRACE_S)
        self._gone.wait(FINALIZE_TIMEOUT_S)


# --- the model and its instances --------------------------------------------------------------


class ProcessModel(Model):
    """A Python model whose instances each run in a stub process (``EXECUTION_MODE: process``)."""

    def __init__(self, context: ModelLoadContext, path: Path, settings: Settings) -> None:
        from inferd.config import config_to_json

        self.name = context.name
        self.version = str(context.version)
        self.path = path
        self.settings = settings
        self.models = context.models
        self.decoupled = bool(context.config.model_transaction_policy.decoupled)
        self.iterative = bool(context.config.sequence_batching.iterative_sequence)
        self.binding = ModelBinding(self.name, self.version, context.model_dir, self.decoupled, context.models)
        self.model_dir = context.model_dir
        if context.loop is None:
            raise InternalError(f"model '{self.name}': an isolated Python model needs a running server's event loop")
        self.loop = context.loop
        self.instances: list[ProcessInstance] = []
        #: What its stubs may log, all instances together (:mod:`inferd_backend_python.stub_logs`).
        self.log_budget = LogBudget(self.name, self.version, functools.partial(STATS.logged, self.name, self.version))
        self._args = {
            "model_config": json.dumps(config_to_json(context.config)),
            "model_repository": str(context.model_dir),
            "model_version": self.version,
            "model_name": self.name,
        }
        self.launcher = Launcher.for_settings(settings, f"model '{self.name}'")  # last: unload releases it
        self._released = False
        FAMILIES.model_loaded(self.binding)
        SOURCES.add(STATS)

    def init_settings(self, spec: InstanceSpec) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "path": str(self.path),
            "model_dir": str(self.model_dir),
            "decoupled": self.decoupled,
            "iterative": self.iterative,
            "args": instance_args(self._args, spec),
            "cpus": list(self.settings.cpus),
            "log_level": logging.getLogger("inferd.python").getEffectiveLevel(),
        }

    def create_instance(self, spec: InstanceSpec) -> Instance:
        instance = ProcessInstance(self, spec)
        instance.stub = Stub.start(instance)
        self.instances.append(instance)
        STATS.started(instance)
        return instance

    def not_serving(self) -> str | None:
        for instance in self.instances:
            if instance.problem is not None:
                return f"instance '{instance.name}' {instance.problem}"
        return None

    async def check_ready(self) -> str | None:
        """The instances' ``is_ready`` in their stubs (when the model defines one)."""
        return await first_problem([i.probe for i in self.instances if i.stub is not None and i.stub.has_is_ready])

    def unload(self) -> None:
        FAMILIES.model_unloaded(self.binding)
        STATS.forget(self)
        if not self._released:  # after the instances' stubs stopped (the builder closes them first)
            self._released = True
            self.launcher.release()


class ProcessInstance(Instance):
    """One instance of an isolated model: its current stub, restarted when it dies.

    Non-blocking: ``execute`` runs on the server's loop, hands the batch to the stub and returns
    the future of its results (no instance thread)."""

    blocking: ClassVar[bool] = False
    #: Batches wait in the stub's socket while one executes: the stub starts the next as soon as it
    #: sent the last one's results, without waiting for the server's loop to hand it over, and
    #: neither side sleeps between batches while requests keep coming. Only the direct scheduler
    #: hands out more than one batch at a time (a dynamic batcher waits for each). Measured with
    #: benchmarks/python_isolation.py at concurrency 8 (2 cores): depth 2 cost ~400 CPU µs per
    #: request, depth 8 ~300 (Triton's stub ~320), the stub no longer waking for each request.
    pipeline_depth: ClassVar[int] = 8

    def __init__(self, model: ProcessModel, spec: InstanceSpec) -> None:
        self.model = model
        self.spec = spec
        self.name = spec.name
        self.label = f"model '{model.name}' instance '{spec.name}'"
        self.stub: Stub | None = None
        #: Why the instance cannot serve now (restarting, or stopped after a crash loop); None: it can.
        self.problem: str | None = None
        self.closing = False
        self._crashes: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.probe = Probe(self.label, self._ask_ready)

    def _ask_ready(self) -> asyncio.Future[bool]:
        stub = self.stub
        if stub is None:
            future: asyncio.Future[bool] = self.model.loop.create_future()
            future.set_exception(InternalError(f"Stub process '{self.name}' is not healthy."))
            return future
        return stub.ask_ready()

    def execute(self, requests: Sequence[InferRequest]) -> Any:
        stub = self.stub
        future = stub.submit(requests) if stub is not None else None
        return self._refuse(requests) if future is None else future

    def _refuse(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        problem = self.problem or "is restarting: its stub process ended"
        error = Unavailable(f"Stub process '{self.name}' is not healthy.; {self.label} {problem}")
        if self.model.decoupled:
            for request in requests:
                if request.response_sender is not None:
                    request.response_sender(error, True)
            return []
        return [error] * len(requests)

    def stub_died(self, stub: Stub, cause: str, kind: str) -> None:
        """Called by ``stub``'s reader once it is gone: count the crash, restart or give up."""
        with self._lock:
            if stub is not self.stub:
                return
            self.stub = None
            if self.closing:
                return
        self._crashed(f"its stub process (pid {stub.pid}) {cause}", kind)

    def _crashed(self, cause: str, kind: str) -> None:
        STATS.crashed(self, kind)
        settings = self.model.settings
        with self._lock:
            if self.closing:
                return
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and self._crashes[0] < now - settings.restart_window_s:
                self._crashes.popleft()
            count = len(self._crashes)
            if count >= settings.restart_limit:
                self.problem = (
                    f"is UNAVAILABLE: {cause}; restarts stopped after {count} crashes within "
                    f"{settings.restart_window_s:g} s (RESTART_LIMIT {settings.restart_limit})"
                )
                _log.error("%s %s", self.label, self.problem)
                return
            delay = min(_BACKOFF_S * 2 ** (count - 1), _BACKOFF_MAX_S)
            self.problem = (
                f"is restarting: {cause} (crash {count} of {settings.restart_limit} allowed within "
                f"{settings.restart_window_s:g} s)"
            )
            self._timer = threading.Timer(delay, self._restart)
            self._timer.daemon = True
            self._timer.start()
        _log.error("%s: %s; restarting it in %.2f s", self.label, cause, delay)

    def _restart(self) -> None:
        try:
            stub = Stub.start(self)
        except InferdError as exc:
            self._crashed(f"its restart failed: {exc.message}", "restart")
            return
        with self._lock:
            if not self.closing:
                self.stub, self.problem = stub, None
                stub = None  # type: ignore[assignment]
        if stub is not None:  # unloaded meanwhile
            stub.finalize()
            return
        STATS.restarted(self)
        _log.info("%s: restarted (stub pid %d)", self.label, self.stub.pid if self.stub else 0)

    def close(self) -> None:
        with self._lock:
            self.closing = True
            if self._timer is not None:
                self._timer.cancel()
            stub, self.stub = self.stub, None
        if stub is not None:
            stub.finalize()


# --- memory watchdog and the stubs' own metrics -----------------------------------------------


class _Watchdog:
    """One thread for every stub of the process: reads their RSS, kills those over their limit."""

    def __init__(self) -> None:
        self._stubs: dict[int, Stub] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._page = os.sysconf("SC_PAGE_SIZE")

    def add(self, stub: Stub) -> None:
        with self._lock:
            self._stubs[id(stub)] = stub
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="inferd-python-watchdog", daemon=True)
                self._thread.start()

    def remove(self, stub: Stub) -> None:
        with self._lock:
            self._stubs.pop(id(stub), None)

    def _run(self) -> None:
        while True:
            with self._lock:
                stubs = list(self._stubs.values())
            limited = False
            for stub in stubs:
                limit = stub.owner.model.settings.memory_limit
                limited = limited or limit is not None
                try:
                    with open(f"/proc/{stub.pid}/statm", "rb") as f:
                        stub.rss = int(f.read().split()[1]) * self._page
                except (OSError, ValueError, IndexError):
                    continue
                if limit is not None and stub.rss > limit:
                    stub.kill(
                        f"exceeded its memory limit: RSS {stub.rss / _MiB:.0f} MiB > MEMORY_LIMIT {limit / _MiB:.0f} MiB",
                        "memory",
                    )
            time.sleep(0.2 if limited else 1.0)


WATCHDOG = _Watchdog()


class _Stats:
    """Crashes by cause, restarts and RSS of the isolated instances, and the log lines of their
    models dropped or cut, for ``/metrics``."""

    def __init__(self) -> None:
        self._crashes: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self._restarts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._log_lines: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._instances: dict[int, ProcessInstance] = {}
        self._lock = threading.Lock()

    def _watch(self, instance: ProcessInstance) -> tuple[str, str, str]:
        self._instances[id(instance)] = instance
        return (instance.model.name, instance.model.version, instance.name)

    def crashed(self, instance: ProcessInstance, kind: str) -> None:
        with self._lock:
            self._crashes[(*self._watch(instance), kind)] += 1

    def restarted(self, instance: ProcessInstance) -> None:
        with self._lock:
            self._restarts[self._watch(instance)] += 1

    def logged(self, model: str, version: str, what: str, n: int) -> None:
        """``n`` log lines of a model version ``what`` ("dropped", "truncated")."""
        with self._lock:
            self._log_lines[(model, version, what)] += n

    def started(self, instance: ProcessInstance) -> None:
        with self._lock:
            self._watch(instance)

    def forget(self, model: ProcessModel) -> None:
        with self._lock:
            for instance in model.instances:
                self._instances.pop(id(instance), None)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import Metric as PromMetric

        with self._lock:
            crashes, restarts = dict(self._crashes), dict(self._restarts)
            log_lines = dict(self._log_lines)
            instances = list(self._instances.values())
        labels: tuple[str, ...] = ("model", "version", "instance")
        family = PromMetric(
            "inferd_python_stub_crashes_total",
            "Stub processes of isolated Python models that died, by cause (signal, exit, memory, timeout, protocol, "
            "restart)",
            "counter",
        )
        family.name = "inferd_python_stub_crashes_total"
        for crash, n in sorted(crashes.items()):
            family.add_sample(family.name, dict(zip((*labels, "cause"), crash, strict=True)), n)
        yield family
        family = PromMetric("inferd_python_stub_restarts_total", "Stub processes restarted after a crash", "counter")
        family.name = "inferd_python_stub_restarts_total"
        for restart, n in sorted(restarts.items()):
            family.add_sample(family.name, dict(zip(labels, restart, strict=True)), n)
        yield family
        for what, text in (("dropped", "dropped: over the model's log budget"),
                           ("truncated", f"cut to {LINE_CHARS} characters")):  # fmt: skip
            name = f"inferd_python_stub_log_lines_{what}_total"
            family = PromMetric(name, f"Log lines of isolated Python models {text}", "counter")
            family.name = name
            for (model, version, kind), n in sorted(log_lines.items()):
                if kind == what:
                    family.add_sample(name, {"model": model, "version": version}, n)
            yield family
        family = PromMetric("inferd_python_stub_rss_bytes", "Resident memory of each running stub process", "gauge")
        for instance in instances:
            stub = instance.stub
            if stub is not None and stub.rss:
                which = (instance.model.name, instance.model.version, instance.name)
                family.add_sample(family.name, dict(zip(labels, which, strict=True)), stub.rss)
        yield family


STATS = _Stats()
