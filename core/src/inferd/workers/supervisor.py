"""The ``inferd serve --workers N`` parent: starts N workers, restarts one that dies, stops all.

It serves nothing itself and builds no server: each worker is ``inferd serve`` run again with the
same arguments plus its place (``--worker-index``, ``--worker-dir``), so every worker parses the
same options and loads the same plugins.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from inferd.workers.control import call
from inferd.workers.peers import WorkerSlot

log = logging.getLogger(__name__)

#: How often the supervisor looks at its workers.
TICK_S = 0.2
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the worker gets SIGTERM if the supervisor dies, so none is left behind."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def hold_port(host: str) -> socket.socket:
    """A port the system picks on ``host``, held for the workers: bound with SO_REUSEPORT but not
    listening, so each worker can bind it too (connections go only to listening sockets) and no
    other program can take it while the supervisor runs."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, 0))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: no free port on {host}: {exc.strerror}") from None
    return sock


def _how(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


class Supervisor:
    """Runs ``count`` workers of ``inferd serve <argv>`` until SIGINT or SIGTERM."""

    def __init__(self, argv: Sequence[str], count: int, grace_s: float) -> None:
        self.argv = list(argv)
        self.count = count
        self.grace_s = grace_s
        self.directory = Path(tempfile.mkdtemp(prefix="inferd-workers-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ready = [False] * count
        #: Every worker was ready once: from then on a worker that dies is restarted.
        self.up = False
        self._stopping = False

    def run(self) -> int:
        """Start the workers and watch them; the exit code of ``inferd serve``."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        try:
            self.procs = [self._spawn(i) for i in range(self.count)]
            while not self._stopping:
                code = self._watch()
                if code is not None:
                    return code
                time.sleep(TICK_S)
            return 0
        finally:
            self._stop_all()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        slot = WorkerSlot(index, self.count, self.directory)
        cmd = [sys.executable, "-c", "import sys; from inferd.cli import main; sys.exit(main())", *self.argv,
               "--worker-index", str(index), "--worker-dir", str(slot.directory)]  # fmt: skip
        self.ready[index] = False
        return subprocess.Popen(cmd, preexec_fn=_die_with_parent)  # the supervisor runs no threads

    def _watch(self) -> int | None:
        """Restart workers that died; an exit code when a worker failed before the server ever was ready."""
        for index, proc in enumerate(self.procs):
            code = proc.poll()
            if code is None:
                self.ready[index] = self.ready[index] or self._is_ready(index)
                continue
            if self._stopping:
                return None
            if not self.ready[index] and not self.up:
                log.error("worker %d (pid %d) %s before it was ready; stopping", index, proc.pid, _how(code))
                return code or 1
            if not self.ready[index]:
                time.sleep(1.0)  # it failed while starting again: do not spin
            log.error("worker %d (pid %d) %s; restarting it", index, proc.pid, _how(code))
            self.procs[index] = self._spawn(index)
            log.info("worker %d restarted (pid %d)", index, self.procs[index].pid)
        if not self.up and all(self.ready):
            self.up = True
            log.info("all %d workers ready", self.count)
        return None

    def _is_ready(self, index: int) -> bool:
        """The worker started serving (its models' states aside: ``--strict-readiness`` is not its concern)."""
        try:
            return call(WorkerSlot(index, self.count, self.directory).socket(index), "started", timeout=1.0) is True
        except OSError:
            return False

    def _stop_all(self) -> None:
        """SIGTERM every worker (each drains for up to its exit timeout), then SIGKILL what is left."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker (pid %d) did not stop in time; killing it", proc.pid)
                proc.kill()
                proc.wait()
