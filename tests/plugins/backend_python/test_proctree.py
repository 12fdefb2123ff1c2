"""``proctree``: a real process tree (a child, and a grandchild in a session of its own that ignores
SIGTERM) is found whole, by ``/proc/<pid>/task/*/children`` and by the ``/proc/<pid>/stat`` scan
alike, and ended whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from inferd_backend_python import proctree

# Ignores SIGTERM, then says so with its pid.
GRANDCHILD = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(os.getpid(), flush=True); " \
             "time.sleep(600)"  # fmt: skip
# Starts the grandchild in a new session and passes its line on.
CHILD = (
    "import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True, "
    "stdout=subprocess.PIPE, text=True); print(p.stdout.readline().strip(), flush=True); time.sleep(600)"
)
# A child subreaper, as a stub is (BOOT): prints the child's pid and the grandchild's once both run.
ROOT = (
    "import ctypes, subprocess, sys, time; ctypes.CDLL(None).prctl(36, 1, 0, 0, 0); "
    "c = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True); "
    "print(c.pid, c.stdout.readline().strip(), flush=True); time.sleep(600)"
)


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def test_a_tree_is_found_and_ended_whole() -> None:
    root = subprocess.Popen([sys.executable, "-c", ROOT, CHILD, GRANDCHILD], stdout=subprocess.PIPE, text=True)
    assert root.stdout is not None
    child, grandchild = (int(p) for p in root.stdout.readline().split())
    try:
        assert proctree.descendants(root.pid) == [child, grandchild]
        assert proctree._children_by_stat(root.pid) == [child] == proctree._children(root.pid)
        proctree.end(root, grace=1.0)
        assert root.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while not (_gone(child) and _gone(grandchild)):
            assert time.monotonic() < deadline, (child, grandchild)
            time.sleep(0.05)
    finally:
        for pid in (child, grandchild):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        if root.poll() is None:
            root.kill()
            root.wait()
