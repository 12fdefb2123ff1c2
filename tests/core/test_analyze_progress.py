"""``inferd analyze`` counts its points as it measures them, with the time left and whether each
point was stable (``[2/4, about 3 s left] batch 1, concurrency 2: ..., stable``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from inferd.testing import ServerProcess, write_repository
from inferd.tools.analyze.progress import duration
from tests.e2e import models

POINT = re.compile(r"^  \[(\d+)/(\d+)(?:, about (.+) left)?\] batch 1, concurrency \d: .* ms, (stable|UNSTABLE)")


def test_every_point_is_counted_with_the_time_left_and_its_stability(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"add": models.add_sub()})
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=add"]) as server:
        run = subprocess.run(
            [sys.executable, "-m", "inferd.host.cli", "analyze", "-m", "add", "-u", server.http_url,
             "--instance-counts", "1,2", "--dynamic-batching", "off", "--concurrency", "1,2", "-p", "100", "-r", "3",
             "--no-default-config", "--export-path", str(tmp_path / "results")],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert "2 configurations of model 'add' to measure, 4 points" in run.stdout
    points = [m.groups() for m in map(POINT.match, run.stdout.splitlines()) if m]
    assert [(done, total) for done, total, _, _ in points] == [("1", "4"), ("2", "4"), ("3", "4"), ("4", "4")]
    assert all(left is not None for _, _, left, _ in points[:3]) and points[3][2] is None


def test_durations_read_as_minutes_and_seconds() -> None:
    assert [duration(s) for s in (0.4, 9, 72, 3720)] == ["0 s", "9 s", "1 min 12 s", "1 h 02 min"]
