"""The ``inferd serve --workers N`` parent: starts N workers, restarts one that dies, stops all.

It serves nothing itself and builds no server: each worker is ``inferd serve`` run again with the
same arguments plus its place (``--worker-index``, ``--worker-dir``), so every worker parses the
same options and loads the same plugins.

It also keeps the server whole when workers fail: a dead worker's counters join the retired
totals (:func:`~inferd.workers.counts.retire`), a ready worker whose event loop stops answering
for ``--worker-health-timeout`` seconds is killed and restarted, and worker directories left by a
supervisor that was killed (its pid is in the name) are removed when the next one starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
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

from inferd.contracts.errors import InferdError, StartupError
from inferd.workers.control import call
from inferd.workers.counts import retire
from inferd.workers.peers import WorkerSlot

log = logging.getLogger(__name__)

#: How often the supervisor looks at its workers.
TICK_S = 0.2
#: How often a ready worker's event loop is checked (``alive``), and how long one check waits.
HEALTH_EVERY_S = 1.0
#: Workers killed by a signal before the server was first ready that are restarted, not fatal.
EARLY_KILLS = 3
#: ``--worker-health-timeout``'s default: a ready worker silent this long is killed and restarted.
HEALTH_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1
#: The worker directory's name: ``inferd-workers-<supervisor pid>-<random>``.
_PREFIX = "inferd-workers-"
_DIRECTORY = re.compile(rf"^{_PREFIX}(\d+)-[^-]+$")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the worker gets SIGTERM if the supervisor dies, so none is left behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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
        raise StartupError(f"no free port on {host}: {exc.strerror}") from None
    return sock


def _how(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


#: The longest worker directory path whose control sockets fit in ``sun_path`` (108 bytes on Linux,
#: less the directory's name and ``/worker-<n>.sock``).
_MAX_PARENT = 60


def socket_parent() -> Path:
    """Where the worker directory goes: the temporary directory (``TMPDIR``), or ``/tmp`` when that
    is too long a path for a Unix socket's address."""
    parent = Path(tempfile.gettempdir())
    if len(os.fsencode(parent)) <= _MAX_PARENT:
        return parent
    log.info("TMPDIR %s is too long a path for the workers' control sockets; using /tmp", parent)
    return Path("/tmp")


def remove_stale_directories(parent: Path) -> list[Path]:
    """Remove the worker directories in ``parent`` whose supervisor is dead (killed, so it could not
    clean up); a live supervisor's directory and another user's are left alone. What was removed."""
    removed = []
    for path in parent.glob(f"{_PREFIX}*"):
        match = _DIRECTORY.match(path.name)
        try:
            mine = path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid()
        except OSError:
            continue
        if match and mine and not _alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class Supervisor:
    """Runs ``count`` workers of ``inferd serve <argv>`` until SIGINT, SIGTERM or SIGHUP."""

    def __init__(
        self, argv: Sequence[str], count: int, grace_s: float, health_timeout_s: float = HEALTH_TIMEOUT_S
    ) -> None:
        self.argv = list(argv)
        self.count = count
        self.grace_s = grace_s
        #: A ready worker whose event loop does not answer for this long is killed (0: never).
        self.health_timeout_s = health_timeout_s
        parent = socket_parent()
        for stale in remove_stale_directories(parent):
            log.info("removed %s, left by a supervisor that was killed", stale)
        self.directory = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=parent))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ready = [False] * count
        #: Per worker: when its event loop last answered, and when it is next asked.
        self.answered = [0.0] * count
        self.next_check = [0.0] * count
        #: Every worker was ready once: from then on a worker that dies is restarted.
        self.up = False
        #: Workers killed by a signal before :attr:`up` (see :data:`EARLY_KILLS`).
        self.early_kills = 0
        self._stopping = False

    def run(self) -> int:
        """Start the workers and watch them; the exit code of ``inferd serve``."""
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal closed
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
        cmd = [
            sys.executable,
            "-c",
            "from inferd.host.cli import console_main; console_main()",
            *self.argv,
            "--worker-index",
            str(index),
            "--worker-dir",
            str(slot.directory),
        ]
        self.ready[index] = False
        self.answered[index] = self.next_check[index] = time.monotonic()
        return subprocess.Popen(cmd, preexec_fn=_die_with_parent)  # the supervisor runs no threads

    def _watch(self) -> int | None:
        """Restart workers that died; an exit code when a worker failed before the server ever was ready."""
        for index, proc in enumerate(self.procs):
            code = proc.poll()
            if code is None:
                if self.ready[index]:
                    self._check_health(index, proc)
                else:
                    self.ready[index] = self._is_ready(index)
                    self.answered[index] = time.monotonic()
                continue
            retire(self.directory, proc.pid)  # its counters stay in the sums
            if self._stopping:
                return None
            if not self.ready[index] and not self.up:
                # A worker that exits by itself while starting found something wrong (a bad flag, a
                # port in use): stop. One killed by a signal (by someone else, or while its readiness
                # was still on its way here) is restarted, a few times.
                self.early_kills += code < 0
                if code >= 0 or self.early_kills > EARLY_KILLS:
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

    def _check_health(self, index: int, proc: subprocess.Popen[bytes]) -> None:
        """Ask a ready worker's event loop, every :data:`HEALTH_EVERY_S`; SIGKILL it once it was silent
        for ``health_timeout_s`` (it is restarted as a worker that died)."""
        now = time.monotonic()
        if not self.health_timeout_s or now < self.next_check[index]:
            return
        self.next_check[index] = now + HEALTH_EVERY_S
        try:
            call(WorkerSlot(index, self.count, self.directory).socket(index), "alive", timeout=HEALTH_EVERY_S)
            self.answered[index] = time.monotonic()
            return
        except (OSError, InferdError):
            silent = time.monotonic() - self.answered[index]
        if silent >= self.health_timeout_s and not self._stopping:
            log.error(
                "worker %d (pid %d) did not answer its health check for %.1f s (--worker-health-timeout "
                "%g); killing it",
                index,
                proc.pid,
                silent,
                self.health_timeout_s,
            )
            proc.kill()
            proc.wait()

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
