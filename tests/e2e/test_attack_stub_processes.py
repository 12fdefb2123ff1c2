"""The processes an isolated Python model starts end with it: a child in a
session of its own (``setsid``) and a daemon that left the stub's tree by a double fork (its parent
exited; it ignores SIGTERM) are both gone once the model is unloaded. Before, both lived on
(re-parented to init) after the unload."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source

# The daemon: fork, setsid, fork again (the middle process exits), ignore SIGTERM, sleep.
DAEMON = """
import os, signal, sys, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "a") as f:
    f.write(f"daemon {os.getpid()}\\n")
time.sleep(600)
"""
SPAWNER_PY = f"""
import os, subprocess, sys
import numpy as np
import triton_python_backend_utils as pb_utils

DAEMON = {DAEMON!r}


class TritonPythonModel:
    def initialize(self, args):
        pids = os.path.join(args["model_repository"], "pids")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        with open(pids, "a") as f:
            f.write(f"child {{child.pid}}\\n")
        subprocess.run([sys.executable, "-c", DAEMON, pids], check=True)  # returns once the daemon is out

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([1], np.int32))]) for _ in requests]
"""


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of ``pid``; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0], fields[19]


def _running(pid: int, started: str) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs (a zombie does not)."""
    stat = _stat(pid)
    return stat is not None and stat[1] == started and stat[0] not in ("Z", "X")


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, dict[int, str]]]:
    repo = write_repository(
        tmp_path / "models",
        {"spawner": {"config.pbtxt": source("isolated_flood", "config.pbtxt"), "1/model.py": SPAWNER_PY}},
    )
    started: dict[int, str] = {}  # pid -> start time of each process the model started
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=spawner"]) as srv:
        try:
            yield srv, repo / "spawner" / "pids", started
        finally:
            for pid, when in started.items():  # never leave one behind, whatever the test found
                if _running(pid, when):
                    os.kill(pid, signal.SIGKILL)


def _started(server: ServerProcess, pids: Path, started: dict[int, str]) -> None:
    deadline = time.monotonic() + 60
    while len(lines := pids.read_text().split("\n")[:-1] if pids.exists() else []) < 2:
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    for line in lines:
        pid = int(line.split()[1])
        stat = _stat(pid)
        assert stat is not None and stat[0] not in ("Z", "X"), (line, stat)
        started[pid] = stat[1]
    kinds = sorted(line.split()[0] for line in lines)
    assert kinds == ["child", "daemon"], lines
    assert server.proc is not None
    for pid in started:  # each left the session (and process group) the stub shares with the server
        assert os.getsid(pid) != os.getsid(server.proc.pid)


def _all_gone(started: dict[int, str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while left := [pid for pid, when in started.items() if _running(pid, when)]:
        assert time.monotonic() < deadline, f"still running after the unload: {left}"
        time.sleep(0.1)


def test_the_processes_a_model_started_end_at_its_unload(spawned):
    server, pids, started = spawned
    _started(server, pids, started)
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    client.unload_model("spawner")
    _all_gone(started)


def test_the_processes_a_model_started_end_with_the_server(spawned):
    server, pids, started = spawned
    _started(server, pids, started)
    assert server.stop() == 0
    _all_gone(started)
