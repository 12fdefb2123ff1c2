"""Run the commands of a Markdown page as written, in order, against real servers.

Every fenced ``bash``/``sh`` and ``python`` block of the page runs, in the repository's root, with
four substitutions so that the walk neither needs the default ports nor touches shared paths nor
takes longer than it must: ``localhost:8000`` (``:8001``, ``:8002``, ``:9000``) become the ports
the page's current server bound (it is started on port 0 and writes them to a ``--ports-file``),
``/tmp/`` becomes a private directory, ``.venv/bin/`` the running interpreter's, and an
``inferd perf`` or ``inferd analyze`` run measures short windows (:data:`MEASURE`: three 0.1 s
windows a level at most, where the page's 1 s windows until stable take up to 10 s a level). An
``inferd serve`` line starts a server in the background (stopping the one before) and waits for it
to be ready; install commands (``make``, ``pip install``, ``python -m venv``) are listed, not run.
A ``json`` block right after a command's block is its expected output (lists of index rows
compared on the models they name; abbreviated blocks with ``...`` are not compared), retried for a
while as the poller applies changes; an unlabelled block right after a ``python`` block is its
expected stdout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.testing import free_ports

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SERVE = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:\S*/)?inferd serve\b")
INSTALL = re.compile(r"^(make |pip install |python -m venv )")
#: A measuring ``inferd perf``/``inferd analyze`` command (not ``--help``) and what the walk appends to it
#: (argparse keeps the last value: these override the page's ``-p``).
MEASURING = re.compile(r"^(?:\S*/)?inferd (perf|analyze) (?!--help)")
MEASURE = " -p 100 -r 3"


@dataclass
class Block:
    lang: str
    text: str
    line: int


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [Block(m.group(1), m.group(2), text[: m.start()].count("\n") + 1) for m in FENCE.finditer(text)]


def commands(script: str) -> list[str]:
    """The complete shell commands of a block (a quoted string or a ``\\`` may span lines)."""
    out, pending = [], ""
    for line in script.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if not pending.strip() or pending.rstrip().endswith("\\"):
            continue
        if subprocess.run(["bash", "-n", "-c", pending], capture_output=True).returncode == 0:
            out.append(pending)
            pending = ""
    assert not pending.strip(), f"incomplete command: {pending}"
    return [c for c in out if c.strip() and not c.strip().startswith("#")]


def same(expected: Any, actual: Any) -> bool:
    """Equal; lists of rows with a ``name`` are compared on the names ``expected`` has."""
    if isinstance(expected, list) and expected and all(isinstance(r, dict) and "name" in r for r in expected):
        names = {r["name"] for r in expected}
        return isinstance(actual, list) and [r for r in actual if r.get("name") in names] == expected
    return bool(expected == actual)


@dataclass
class Walk:
    """One page's walk: its private directory, ports and current server."""

    tmp: Path
    openai: bool = False
    env: dict[str, str] = field(default_factory=dict)
    #: The current server's HTTP, gRPC, metrics and OpenAI ports (free ones before the first server).
    ports: list[int] = field(default_factory=lambda: free_ports(4))
    server: subprocess.Popen[bytes] | None = None
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    #: Outputs compared with the page's expected ones.
    compared: int = 0
    #: Where the commands run: the checkout (a fresh copy of it, for a walk from a fresh clone).
    root: Path = ROOT

    def sub(self, text: str) -> str:
        for default, port in zip((8000, 8001, 8002, 9000), self.ports, strict=True):
            text = text.replace(f"localhost:{default}", f"localhost:{port}")
        return text.replace("/tmp/", f"{self.tmp}/").replace(".venv/bin/", f"{Path(sys.executable).parent}/")

    def environ(self) -> dict[str, str]:
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {**os.environ, "PATH": path, **self.env}

    def run(self, page: Path, timeout: float = 600) -> None:
        found = blocks(page)
        try:
            for i, block in enumerate(found):
                after = found[i + 1] if i + 1 < len(found) else None
                where = f"{page.name}:{block.line}"
                if block.lang in ("bash", "sh"):
                    self.shell(block, after, where, timeout)
                elif block.lang == "python":
                    self.python(block, after if after is not None and after.lang == "" else None, where, timeout)
        finally:  # a failed step leaves no server behind
            self.stop()

    def shell(self, block: Block, after: Block | None, where: str, timeout: float) -> None:
        cmds = commands(block.text)
        for n, command in enumerate(cmds):
            first = command.strip()
            if INSTALL.match(first):
                self.skipped.append(first.split("#")[0].strip())
                continue
            if SERVE.match(first):
                self.serve(self.sub(first.split("#")[0].strip()), where, timeout)
                continue
            expected = _expected(after) if n == len(cmds) - 1 else None
            self.ran.append(first)
            if MEASURING.match(first):
                command = command.split("#")[0].rstrip() + MEASURE
            self.check(self.sub(command), expected, where, timeout)

    def check(self, command: str, expected: Any, where: str, timeout: float) -> None:
        deadline = time.monotonic() + (60 if expected is not None else 0)
        while True:
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=self.root,
                                  env=self.environ(), timeout=timeout)  # fmt: skip
            assert done.returncode == 0, f"{where}: {command}\n{done.stdout}\n{done.stderr}\n{self.log()}"
            if expected is None:
                return
            actual = _last_json(done.stdout)
            if same(expected, actual) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert same(expected, actual), f"{where}: {command}\nexpected {expected}\ngot {done.stdout}"
        self.compared += 1

    def python(self, block: Block, output: Block | None, where: str, timeout: float) -> None:
        self.ran.append(f"python block at {where}")
        done = subprocess.run([sys.executable, "-c", self.sub(block.text)], capture_output=True, text=True,
                              cwd=self.root, env=self.environ(), timeout=timeout)  # fmt: skip
        assert done.returncode == 0, f"{where}\n{done.stdout}\n{done.stderr}\n{self.log()}"
        if output is not None:
            assert done.stdout.strip() == output.text.strip(), f"{where}: stdout\n{done.stdout}"
            self.compared += 1

    def serve(self, command: str, where: str, timeout: float) -> None:
        """Start the page's server on ports the system picks (``--ports-file``: no port is picked
        before the server binds it); the commands after it are given those ports."""
        self.stop()
        ports_file = self.tmp / f"ports-{len(self.logs)}.json"
        command += f" --http-port 0 --grpc-port 0 --metrics-port 0 --ports-file {ports_file}"
        if self.openai:
            command += " --openai-port 0"
        log = self.tmp / f"server-{len(self.logs)}.log"
        self.logs.append(log)
        self.ran.append(command)
        with open(log, "wb") as out:
            self.server = subprocess.Popen(["bash", "-c", command], stdout=out, stderr=subprocess.STDOUT,
                                           cwd=self.root, env=self.environ())  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.server.poll() is None, f"{where}: {command} exited\n{self.log()}"
            ports = _ports(ports_file)
            if ports and _status(f"http://localhost:{ports['http']}/v2/health/ready") == 200:
                self.ports = [ports.get(name, 0) for name in ("http", "grpc", "metrics", "openai")]
                return
            time.sleep(0.05)
        raise AssertionError(f"{where}: {command} not ready in {timeout} s\n{self.log()}")

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server = None

    def log(self) -> str:
        return self.logs[-1].read_text(errors="replace")[-6000:] if self.logs else ""


def _ports(path: Path) -> dict[str, int]:
    """The ports a server wrote to its ``--ports-file`` once every frontend listens; {} before."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _expected(block: Block | None) -> Any:
    if block is None or block.lang != "json" or "..." in block.text:
        return None
    try:
        return json.loads(block.text)
    except ValueError:
        return None


def _last_json(stdout: str) -> Any:
    for line in reversed(stdout.strip().splitlines() or [""]):
        try:
            return json.loads(line)
        except ValueError:
            continue
    try:
        return json.loads(stdout)
    except ValueError:
        return None
