"""``inferd serve`` without ``--workers`` (``--workers auto``): a serving process per usable core,
one where a model must not be loaded once per process; the start-up block says which and why."""

from __future__ import annotations

import math
import os
from pathlib import Path

from inferd.testing import ServerProcess, write_repository
from tests.e2e.whoami import WHOAMI, whoami
from tests.waiting import wait_for

SEQUENCE = {
    "config.pbtxt": """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 5000000 }
""",
    "1/model.py": """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
                for r in requests]
""",
}


def cores_here() -> int:
    """The cores this process may use, lowered by a cgroup v2 CPU quota (read here, apart from
    the code under test)."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


def block_line(srv: ServerProcess) -> str:
    wait_for(lambda: "workers ....." in srv.log(), timeout=30, what="the start-up block")
    (line,) = [ln.strip() for ln in srv.log().splitlines() if "workers ....." in ln]
    return line


def test_no_flag_runs_a_worker_per_usable_core(tmp_path):
    repo = write_repository(tmp_path / "models", {"whoami": WHOAMI})
    cores = cores_here()
    with ServerProcess([repo], ["--workers", "auto"]) as srv:
        reason = "1 usable core" if cores == 1 else f"{cores} usable cores"
        assert block_line(srv).endswith(f"workers ................ {cores} (auto: {reason})")
        pids: set[int] = set()
        wait_for(lambda: pids.add(whoami(srv.http_url)) or len(pids) >= cores, what=f"{cores} serving processes")
        assert len(pids) == cores
        if cores > 1:
            assert srv.proc.pid not in pids
            wait_for(lambda: f"all {cores} workers ready" in srv.log(), timeout=30, what="the supervisor's line")


def test_a_sequence_model_keeps_one_process_and_says_why(tmp_path):
    repo = write_repository(tmp_path / "models", {"whoami": WHOAMI, "seq": SEQUENCE})
    with ServerProcess([repo], ["--workers", "auto"]) as srv:
        line = block_line(srv)
        if cores_here() > 1:
            assert line.endswith(
                "workers ................ 1 (auto: model 'seq' batches sequences, whose requests must all reach one process)"
            )
        assert {whoami(srv.http_url) for _ in range(6)} == {srv.proc.pid}  # no supervisor: it serves
        assert "workers ready" not in srv.log()


def test_an_explicit_count_is_shown_as_given(tmp_path):
    repo = write_repository(tmp_path / "models", {"whoami": WHOAMI})
    with ServerProcess([repo], ["--workers", "1"]) as srv:
        assert block_line(srv).endswith("workers ................ 1 (--workers 1)")
