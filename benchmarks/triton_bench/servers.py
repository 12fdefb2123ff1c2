"""Start the servers under test on free ports, wait until they are ready, stop them.

inferd (``.venv/bin/python -m inferd.host.cli serve``), the real Triton (``start.sh`` of the shared reference) and the
null stacks (``null_servers.py``) all run as child processes in their own process group, so the
whole tree (Triton's stubs, inferd's workers) stops together.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: ``inferd`` as a module of the venv's Python: whichever checkout PYTHONPATH puts first is the one that
#: runs (the ``inferd`` script names an entry function a ``--baseline`` checkout may not have).
#: ``python -m inferd.host.cli``, or ``-m inferd.cli`` in a checkout from before the layout of packages
#: (a ``--baseline``): the same command line works for both.
CLI = (
    "import importlib.util, runpy, sys; sys.argv[0] = 'inferd'; "
    "runpy.run_module('inferd.host.cli' if importlib.util.find_spec('inferd.host') else 'inferd.cli', run_name='__main__')"
)
INFERD = [str(ROOT / ".venv" / "bin" / "python"), "-c", CLI]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Server:
    """A started server: its label, ports, process and log file."""

    label: str
    cmd: list[str]
    http_port: int | None
    grpc_port: int | None
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, ready_path: str | None, timeout: float = 180.0) -> Server:
        """Start the process; wait until ``ready_path`` answers 200 (HTTP) and the gRPC port accepts."""
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited {self.proc.returncode}:\n{self.log_tail()}")
            if self._ready(ready_path):
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.label} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def _ready(self, ready_path: str | None) -> bool:
        if self.http_port:
            up = http_get(self.http_port, ready_path)[0] == 200 if ready_path else _accepts(self.http_port)
            if not up:
                return False
        return self.grpc_port is None or _accepts(self.grpc_port)

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def http_get(port: int, path: str) -> tuple[int, bytes]:
    """GET ``path``; (0, b"") when nothing answers."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError:
        return 0, b""


def inference_counts(port: int, model: str) -> tuple[int, int]:
    """(success, fail) request counts of ``model`` from the KServe statistics extension."""
    status, body = http_get(port, f"/v2/models/{model}/stats")
    if status != 200:
        return -1, -1
    stats = json.loads(body)["model_stats"]
    ok = sum(s["inference_stats"]["success"]["count"] for s in stats)
    fail = sum(s["inference_stats"]["fail"]["count"] for s in stats)
    return ok, fail


def checkout_env(checkout: Path) -> dict[str, str]:
    """The environment that runs another checkout's inferd from this .venv: its core and plugin
    sources first on PYTHONPATH (ahead of the editable installs, which point at this one)."""
    paths = [checkout / "core" / "src", *sorted(checkout.glob("plugins/*/src"))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p.resolve()) for p in paths)}


def inferd_flags(env: dict[str, str] | None = None) -> set[str]:
    """The long options ``inferd serve --help`` offers (run with ``env``)."""
    out = subprocess.run([*INFERD, "serve", "--help"], capture_output=True, text=True, check=True, env=env).stdout
    return set(re.findall(r"--[a-z][a-z0-9-]*", out))


def inferd(
    repo: Path,
    workers: str | None,
    transport: str | None,
    work: Path,
    name: str = "inferd",
    env: dict[str, str] | None = None,
) -> Server:
    """An ``inferd serve`` on ``repo``; ``workers``/``transport`` None leave that flag out (``workers``
    "auto": the flag's default, also left out); ``env`` (:func:`checkout_env`) runs another
    checkout's sources."""
    h, g, m = free_ports(3)
    cmd = [
        *INFERD,
        "serve",
        "--model-repository",
        str(repo),
        "--http-address",
        "127.0.0.1",
        "--http-port",
        str(h),
        "--grpc-port",
        str(g),
        "--metrics-port",
        str(m),
    ]
    if workers is not None and workers != "auto":
        cmd += ["--workers", workers]
    if transport is not None:
        cmd += ["--grpc-transport", transport]
    label = f"{name.replace('@', '-')}-w{workers or 1}" + (f"-{transport}" if transport else "")
    return Server(label, cmd, h, g, work / f"{label}.log", env)


def triton(repo: Path, triton_dir: Path, work: Path) -> Server:
    """The real Triton 2.51 (``start.sh``) on ``repo``."""
    h, g, m = free_ports(3)
    cmd = ["bash", str(triton_dir / "start.sh"), str(repo), str(h), str(g), str(m)]
    return Server("triton", cmd, h, g, work / "triton.log")


def null_http(loop: str, work: Path) -> Server:
    """The null ASGI handler on uvicorn + httptools with ``loop`` (asyncio or uvloop)."""
    (port,) = free_ports(1)
    script = Path(__file__).with_name("null_servers.py")
    cmd = [sys.executable, str(script), "http", "--loop", loop, "--port", str(port)]
    return Server(f"null-uvicorn-{loop}", cmd, port, None, work / f"null-http-{loop}.log")


def null_grpc(work: Path) -> Server:
    """The null grpc.aio server answering a fixed ModelInferResponse."""
    (port,) = free_ports(1)
    script = Path(__file__).with_name("null_servers.py")
    cmd = [sys.executable, str(script), "grpc", "--port", str(port)]
    return Server("null-grpc.aio", cmd, None, port, work / "null-grpc.log")
