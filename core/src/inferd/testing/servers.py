"""Real servers for tests: a subprocess running ``inferd serve`` or an in-process server."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from inferd.host import huge_pages

#: How often a wait polls (a port file, a health endpoint).
POLL_S = 0.02


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports that were free a moment ago on 127.0.0.1 (all held while
    they are picked: picked one by one, the kernel may hand out the same port twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


_numbers = itertools.count()


class ServerProcess:
    """``inferd serve`` in a subprocess; logs go to ``log_path``.

    The server binds ports the system picks (port 0) and writes them to a ports file
    (``--ports-file``), which :meth:`start` reads back: ``http_port``, ``grpc_port`` and
    ``metrics_port`` then say where it listens, and ``ports`` has every frontend's port by name
    (``{"http": ..., "grpc": ..., "metrics": ..., "openai": ...}``). A port set before :meth:`start`
    is used as it is; a server started again keeps the ports it had.
    """

    def __init__(
        self,
        repositories: Sequence[Path],
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.repositories = [Path(r) for r in repositories]
        self.args = list(args)
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.ports: dict[str, int] = {}
        self.env = {**os.environ, **(env or {})}
        tunables = huge_pages.wanted(self.env)
        if tunables is not None:  # what `inferd serve` would start over with: spare each server the second start
            self.env[huge_pages.VARIABLE] = tunables
        number = f"{os.getpid()}-{next(_numbers)}"
        self.log_path = log_path or Path(self.repositories[0]).parent / f"inferd-{number}.log"
        self.ports_path = Path(tempfile.gettempdir()) / f"inferd-ports-{number}.json"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        """The command line: ``inferd serve`` on 127.0.0.1, one serving process unless ``args``
        name ``--workers`` (tests start many servers on small machines; ``--workers auto``, the
        command's own default, runs one per core)."""
        cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--http-address", "127.0.0.1"]
        if not any(a == "--workers" or a.startswith("--workers=") for a in self.args):
            cmd += ["--workers", "1"]
        for repo in self.repositories:
            cmd += ["--model-repository", str(repo)]
        cmd += [
            "--http-port",
            str(self.http_port),
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-port",
            str(self.metrics_port),
            "--ports-file",
            str(self.ports_path),
            *self.args,
        ]
        return cmd

    def start(self, timeout: float = 120.0, wait_ready: bool = True) -> ServerProcess:
        self.ports_path.unlink(missing_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes to it until stop() closes it
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        self.wait_ports(timeout)
        self.wait_live(timeout)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ports(self, timeout: float = 120.0) -> dict[str, int]:
        """Wait until the server wrote its ports file (once every frontend listens) and take its ports."""
        deadline = time.monotonic() + timeout
        while not self._read_ports():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"inferd did not listen in {timeout} s (no {self.ports_path}):\n{self.log()}")
            time.sleep(POLL_S)
        return self.ports

    def _read_ports(self) -> bool:
        try:
            ports = json.loads(self.ports_path.read_text())
        except (OSError, ValueError):
            return False
        self.ports = ports
        self.http_port = ports.get("http", self.http_port)
        self.grpc_port = ports.get("grpc", self.grpc_port)
        self.metrics_port = ports.get("metrics", self.metrics_port)
        return True

    def wait_live(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.proc.returncode}:\n{self.log()}")
            if (self.http_port or self._read_ports()) and _get(f"http://{self.http_url}/v2/health/live") == 200:
                return
            time.sleep(POLL_S)
        raise TimeoutError(f"inferd did not become live in {timeout} s:\n{self.log()}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"inferd exited with {self.proc.returncode}:\n{self.log()}")
            if _get(f"http://{self.http_url}/v2/health/ready") == 200:
                return
            time.sleep(POLL_S)
        raise TimeoutError(f"inferd did not become ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.ports_path.unlink(missing_ok=True)
        return int(self.proc.returncode)

    def __enter__(self) -> ServerProcess:
        """Start the server, unless ``start()`` already did (``with ServerProcess(...).start()``
        must not start a second one and leave the first running)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class InProcessServer:
    """A server built in this process with the given plugin objects, on a background thread.

    Entry points are not loaded unless ``load_entrypoints`` is true, so a test controls exactly
    which plugins exist.
    """

    def __init__(
        self,
        repositories: Sequence[Path],
        plugins: Iterable[Any] = (),
        load_entrypoints: bool = False,
        disabled: Iterable[str] = (),
        **options: Any,
    ) -> None:
        from inferd.host.plugins import PluginHost
        from inferd.host.server import Server, ServerOptions

        self.http_port = options.pop("http_port", 0)  # 0: a port the system picks, known once started
        self.grpc_port = options.pop("grpc_port", 0)
        self.metrics_port = options.pop("metrics_port", 0)
        #: Every frontend's port by name once started: ``{"http": ..., "grpc": ..., "metrics": ...}``.
        self.ports: dict[str, int] = {}
        opts = ServerOptions(
            model_repositories=[Path(r) for r in repositories],
            host="127.0.0.1",
            http_port=self.http_port,
            grpc_port=self.grpc_port,
            metrics_port=self.metrics_port,
            **options,
        )
        host = PluginHost(load_entrypoints=load_entrypoints, plugins=plugins, disabled=disabled)
        self.server = Server(opts, host=host)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started = threading.Event()

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout: float = 120.0) -> InProcessServer:
        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                try:
                    await self.server.start()
                finally:
                    self._started.set()
                await self._stop.wait()
                await self.server.stop()

            try:
                asyncio.run(main())
            except BaseException as exc:  # surfaced by start()
                self._error = exc
                self._started.set()

        self._thread = threading.Thread(target=run, name="inferd-test-server", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("in-process inferd did not start")
        if self._error is not None:
            raise RuntimeError(f"in-process inferd failed to start: {self._error}") from self._error
        self.ports = self.server.ports()
        self.http_port = self.ports.get("http", self.http_port)
        self.grpc_port = self.ports.get("grpc", self.grpc_port)
        self.metrics_port = self.ports.get("metrics", self.metrics_port)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(60)

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
