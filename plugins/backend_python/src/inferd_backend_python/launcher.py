"""Starting the stub processes of an isolated model, and saying how one ended.

A stub is ``python -c BOOT ...`` (:data:`~inferd_backend_python.stub.BOOT`) with the server's
interpreter, or the one of the model's ``EXECUTION_ENV_PATH``; it gets one end of a socket pair and
the two rings of shared memory (:mod:`~inferd_backend_python.ipc`). Every stub of a backend is
started by one thread (:attr:`~inferd_backend_python.isolation.Isolation.spawner`) that lives while
the backend has isolated models: a stub asks the kernel to kill it when the thread that started it
ends (``PR_SET_PDEATHSIG``), so a server that dies, even by SIGKILL, leaves no stub behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.api import ErrorKind, InferdError, InternalError
from inferd_backend_python import env as environments
from inferd_backend_python import ipc
from inferd_backend_python.shm import Ring
from inferd_backend_python.stub import BOOT

if TYPE_CHECKING:
    from inferd_backend_python.isolation import Threads
    from inferd_backend_python.process_settings import Settings


def package_dirs() -> list[str]:
    """The directories of the packages a stub loads from the server's copies: inferd (its ``api``
    module's directory is the package's), this backend, and ``triton_python_backend_utils``."""
    import triton_python_backend_utils

    import inferd.api
    import inferd_backend_python

    return [str(Path(str(m.__file__)).parent) for m in (inferd.api, inferd_backend_python, triton_python_backend_utils)]


@dataclass(frozen=True)
class Launcher:
    """How to start a model's stubs: the interpreter, its environment variables, and the thread
    that starts them."""

    python: str
    variables: dict[str, str] | None
    env_source: str | None
    spawner: Threads
    environment: environments.Environment | None = None

    @classmethod
    def for_settings(cls, settings: Settings, label: str, spawner: Threads) -> Launcher:
        """The server's interpreter, or the environment's (an archive is unpacked: :meth:`release`)."""
        if settings.env_path is None:
            return cls(sys.executable, None, None, spawner)
        found = environments.prepare(settings.env_path, label, settings.env_limits)
        return cls(found.python, found.variables, found.source, spawner, found)

    def release(self, linger_s: float = 0.0) -> None:
        """Done starting stubs: an unpacked environment's directory goes with its last user."""
        if self.environment is not None:
            environments.release(self.environment, linger_s)

    def spawn(self, on_backlog: Callable[[], None] | None = None) -> tuple[subprocess.Popen[bytes], ipc.Channel]:
        """A new stub and the server's end of its channel (non-blocking when ``on_backlog`` is given)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            to_stub, to_fd = Ring.create()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        try:
            from_stub, from_fd = Ring.create()
        except BaseException:
            os.close(to_fd)
            ours.close()
            theirs.close()
            raise
        rings = f"{to_fd},{from_fd},{Ring.SIZE}"
        command = [self.python, "-c", BOOT, str(theirs.fileno()), rings, str(os.getpid()), *package_dirs()]
        try:
            proc = self.spawner.submit(_start, command, (theirs.fileno(), to_fd, from_fd), self.variables).result()
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
            os.close(to_fd)
            os.close(from_fd)
        return proc, ipc.Channel(ours, to_stub, from_stub, on_backlog)

    def failure(self, body: Sequence[Any], label: str) -> InferdError:
        """The error of a FAILED message: ``(message, error kind)``, "import" for a stub that could
        not import its packages."""
        message, kind = body
        if kind == "import":
            return self.import_failure(message, label)
        return InferdError(message, ErrorKind(kind))

    def import_failure(self, detail: str, label: str) -> InferdError:
        if self.env_source is None:
            return InternalError(f"{label}: the stub process could not start: {detail}")
        return InternalError(
            f"{label}: the Python of EXECUTION_ENV_PATH '{self.env_source}' ({self.python}) cannot run the "
            f"python backend stub: {detail}; the environment needs Python >= 3.10 with numpy installed"
        )


def _start(command: list[str], fds: tuple[int, ...], variables: dict[str, str] | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        pass_fds=fds,
        env=variables,
        process_group=0,  # a terminal's Ctrl-C goes to the server, which stops its stubs
    )


def exit_cause(returncode: int, reason: str | None) -> str:
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


def cause_kind(returncode: int, kind: str | None) -> str:
    """The cause a crash is counted under: the server's (memory, timeout...), else signal or exit."""
    return kind or ("signal" if returncode < 0 else "exit")
