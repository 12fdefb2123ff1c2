"""Closing the terminal (SIGHUP to the server's process group) stops inferd as Ctrl-C does: every
serving process drains, unloads its models and exits 0, and the supervisor removes its directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferd.testing import write_repository
from tests.e2e import models


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_stops_the_server_cleanly(tmp_path: Path, workers: int) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    ports, log = tmp_path / "ports.json", tmp_path / "server.log"
    command = [sys.executable, "-c", "from inferd.host.cli import console_main; console_main()", "serve",
               "--model-repository", str(repo), "--workers", str(workers), "--ports-file", str(ports),
               "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]  # fmt: skip
    with open(log, "wb") as out:  # its own session: the process group a terminal would hang up
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (ports.exists() and "] serving:" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert json.loads(ports.read_text())["http"] > 0
        if workers > 1:
            while "workers ready" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGHUP)
        assert proc.wait(60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert text.count("unloaded 1 model; inferd stopped in") == workers, text
