"""The server's connection to one stub process: starting it, reading what it sends, and its death.

The server's event loop reads the stub's socket as soon as it is readable and hands each message
to the stub's :class:`~inferd_backend_python.stub_batches.Batches` (results, streamed responses)
or :class:`~inferd_backend_python.stub_calls.StubCalls` (BLS, logs, metrics, readiness). A message
that breaks the protocol gets the stub killed ("sent a malformed message"), as does one that leaves
the server's messages unread. Its death, seen as the socket closing, fails what it held.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from typing import Any, Protocol

from inferd.api import InferdError, InternalError, Unavailable
from inferd_backend_python import ipc, proctree
from inferd_backend_python.launcher import cause_kind, exit_cause
from inferd_backend_python.shm import Block, Malformed, Tensors
from inferd_backend_python.stub_batches import Batches
from inferd_backend_python.stub_calls import StubCalls
from inferd_backend_python.stub_context import StubContext

_log = logging.getLogger("inferd.contracts.backend.python")

#: How long a stub may take to start and run ``initialize`` (Triton's default stub timeout is 30 s;
#: a model importing a large framework needs longer on a busy machine).
START_TIMEOUT_S = 300.0
#: How long ``finalize`` may take at unload before the stub is killed.
FINALIZE_TIMEOUT_S = 30.0
#: How long the processes a model started have, once asked to stop (SIGTERM) at unload, before they
#: are killed with their stub (:mod:`inferd_backend_python.proctree`).
DESCENDANTS_GRACE_S = 2.0
#: Messages the event loop reads from one stub before it serves others (then it comes back).
_READ_BATCH = 64


class Owner(Protocol):
    """The instance a stub runs for."""

    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def closing(self) -> bool: ...

    def stub_died(self, stub: Stub, cause: str, kind: str) -> None:
        """Called once the stub is gone (not on the loop), before its requests fail."""


class Stub:
    """One running stub process: its channel, read and written by the server's event loop, and
    what it holds (see the module's docstring)."""

    def __init__(self, owner: Owner, context: StubContext, proc: subprocess.Popen[bytes], channel: ipc.Channel) -> None:
        self.owner = owner
        self.context = context
        self.proc = proc
        self.pid = proc.pid
        self.channel = channel
        self.loop = context.loop
        #: Its resident memory, as the watchdog last read it, and the most it may use.
        self.rss = 0
        self.memory_limit = context.settings.memory_limit
        self._fd = channel.sock.fileno()
        self.batches = Batches(
            self.loop, owner.label, context.decoupled, context.settings.execute_timeout_s, self.send, self.kill
        )
        self.calls = StubCalls(context, owner.name, self.send, self._violation, self.batches)
        self._ignoring = False
        self._lock = threading.Lock()
        self._kill_reason: str | None = None
        self._kill_kind: str | None = None
        self._started = threading.Event()
        self._start_error: InferdError | None = None
        self._finalized = threading.Event()
        self._gone = threading.Event()
        #: The model defines ``is_ready`` (the stub says so once ``initialize`` returned).
        self.has_is_ready = False

    @classmethod
    def start(cls, owner: Owner, context: StubContext, init: dict[str, Any]) -> Stub:
        """Start a stub and run the model's ``initialize`` in it with the settings ``init``; raises
        when that fails (blocking: not on the loop)."""
        holder: list[Stub] = []
        proc, channel = context.launcher.spawn(lambda: holder[0].wake_writer())
        channel.block_limit = context.settings.memory_limit
        stub = cls(owner, context, proc, channel)
        holder.append(stub)
        context.loop.call_soon_threadsafe(context.loop.add_reader, stub._fd, stub._readable)
        with contextlib.suppress(OSError):  # it died already: the reader says how
            channel.send(ipc.INIT, init)
        if not stub._started.wait(START_TIMEOUT_S):
            stub.kill(f"did not finish initialize within {START_TIMEOUT_S:g} s", "timeout")
            stub._started.wait()
        if stub._start_error is not None:
            stub.kill(None, None)
            raise stub._start_error
        context.isolation.watchdog.add(stub)
        return stub

    # -- writing --

    def send(self, kind: int, body: Any, tensors: Tensors | None = None, wait: bool = True) -> None:
        """Send a message; a stub that left too many unread is killed, a dead one is let be."""
        try:
            self.channel.send(kind, body, tensors, wait=wait)
        except ipc.Backlogged as exc:
            self.kill(f"stopped reading the server's messages ({exc})", "protocol")
        except OSError:
            pass  # it died: the loop sees the socket close and fails what it held

    def wake_writer(self) -> None:
        """Some messages wait for the stub to read (any thread): the loop sends them as the socket
        takes them."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
            self.loop.call_soon_threadsafe(self._backlogged)

    def _backlogged(self) -> None:
        if not self.batches.closed:
            self.loop.add_writer(self._fd, self._writable)

    def _writable(self) -> None:
        try:
            done = self.channel.flush()
        except OSError:
            done = True
        if done:
            self.loop.remove_writer(self._fd)

    # -- reading (on the loop) --

    def _readable(self) -> None:
        channel = self.channel
        batches = self.batches
        for _ in range(_READ_BATCH):
            try:
                message = channel.recv()
            except BlockingIOError:
                return
            except Malformed as exc:
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
                        batches.result(body, block)
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

    def _dispatch(self, kind: int, body: Any, block: Block) -> None:
        calls = self.calls
        if kind == ipc.SEND:
            self.batches.response(body, block)
        elif kind == ipc.CANCELLED:
            calls.cancelled(body)
        elif kind == ipc.BLS_CALL:
            calls.bls(body, block)
        elif kind == ipc.LOG:
            calls.log(body)
        elif kind == ipc.METRIC:
            calls.metric(body)
        elif kind == ipc.READINESS:
            calls.readiness(*body)
        elif kind == ipc.READY:
            self.has_is_ready = isinstance(body, tuple) and len(body) == 2 and body[1] is True
            self._started.set()
        elif kind == ipc.FAILED:
            self._start_error = self.context.launcher.failure(body, self.owner.label)
            self._started.set()
        elif kind == ipc.FINALIZED:
            self._finalized.set()
        else:
            raise Malformed(f"a message of unknown kind {kind}")

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
        self.batches.closed = True
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
        self.context.isolation.watchdog.remove(self)
        with self._lock:
            reason, kind = self._kill_reason, self._kill_kind
        cause = exit_cause(code, reason)
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
        owner.stub_died(self, cause, cause_kind(code, kind))
        if owner.closing:
            error: InferdError = Unavailable(f"{owner.label} was unloaded while the request ran")
        else:
            error = InternalError(
                f"Failed to process the request(s) for model '{self.context.model_name}', message: Stub process "
                f"'{owner.name}' is not healthy.; it {cause} (pid {self.pid})"
            )
        try:
            self.loop.call_soon_threadsafe(self._fail, error)
        except RuntimeError:  # the loop is closed: the server is stopping
            self._gone.set()

    def _fail(self, error: InferdError) -> None:
        """Fail every request and question the dead stub held (on the loop)."""
        self.calls.fail()
        self.batches.fail(error)
        self._gone.set()

    def finalize(self) -> None:
        """Ask the stub to run ``finalize`` and exit; kill it if it takes too long (blocking)."""
        self.send(ipc.FINALIZE, None)
        if not self._finalized.wait(FINALIZE_TIMEOUT_S):
            _log.warning(
                "%s: finalize did not return within %g s; killing its stub", self.owner.label, FINALIZE_TIMEOUT_S
            )
        self.kill("was unloaded", "unload", DESCENDANTS_GRACE_S)
        self._gone.wait(FINALIZE_TIMEOUT_S)
