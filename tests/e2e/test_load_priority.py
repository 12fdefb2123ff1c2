"""``--model-load-nice``: a model's load on demand runs at a lower OS priority than requests (Linux
nice value), and no thread is left lower once it is done: the model's own threads (created by its
load) answer requests at the process's priority. A load at start runs as requests do.

``load_priority`` (tests/fixtures/python_models) answers the nice value of the thread its
``initialize`` ran on and of the thread its ``execute`` runs on."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import python_model


def _may_restore_priority() -> bool:
    """Whether this process (as the server would) may lower a thread's nice value back."""
    outcome = [False]

    def attempt() -> None:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + 1)
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) - 1)
        except OSError:
            return
        outcome[0] = True

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join()
    return outcome[0]


def _nices(url: str, model: str) -> tuple[int, int]:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    x = httpclient.InferInput("X", [1], "INT32")
    x.set_data_from_numpy(np.zeros(1, dtype=np.int32))
    result = client.infer(model, [x])
    return int(result.as_numpy("INIT_NICE")[0]), int(result.as_numpy("RUN_NICE")[0])


def _thread_nices(pid: int) -> dict[str, int]:
    """Each thread's nice value (``/proc/PID/task/TID/stat``, field 19) by ``name (tid)``."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        found[f"{name} ({task.name})"] = int(fields[16])
    return found


@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or not _may_restore_priority(),
    reason="lowering a load's priority needs Linux and the right to restore it (root, CAP_SYS_NICE or RLIMIT_NICE)",
)
@pytest.mark.parametrize(
    ("flags", "load_nice"),
    [
        (["--model-load-on-demand=true"], 10),
        (["--model-load-on-demand=true", "--model-load-nice=3"], 3),
        (["--model-load-on-demand=true", "--model-load-nice=0"], 0),
        ([], 0),  # loaded at start
    ],
)
def test_loads_run_lower_and_leave_no_thread_lower(tmp_path: Path, flags: list[str], load_nice: int) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    repo = write_repository(tmp_path / "models", {"p": python_model("load_priority")})
    with ServerProcess([repo], flags) as srv:
        assert srv.proc is not None
        assert _nices(srv.http_url, "p") == (base + load_nice, base)  # (on demand: loaded by this request)
        assert _nices(srv.http_url, "p") == (base + load_nice, base)
        lower = {name: nice for name, nice in _thread_nices(srv.proc.pid).items() if nice != base}
        assert not lower, lower
