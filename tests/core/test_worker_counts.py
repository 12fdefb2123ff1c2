"""Counters that outlive a worker (``inferd.workers.counts``) and stale worker directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from inferd.engine.stats import ModelStats
from inferd.workers import merge
from inferd.workers.counts import CountsFile, counts_path, retire
from inferd.workers.supervisor import remove_stale_directories, socket_parent


def stats(successes: int, failures: int = 0) -> ModelStats:
    out = ModelStats("m", "1")
    for _ in range(successes):
        out.record_execution(1, 10, 20, 30)
        out.record_success(65, 5, 10, 20, 30)
    for _ in range(failures):
        out.record_failure(7, "REJECTED")
    return out


def family(kind: str, value: float) -> list[Any]:
    return ["custom", kind, "help", [["custom_total" if kind == "counter" else "custom", {"m": "a"}, value]]]


def counts(pid: int, successes: int, source: float = 0.0, kind: str = "counter") -> dict[str, Any]:
    s = stats(successes)
    return {"pid": pid, "stats": [s.as_dict()], "snapshots": [["m", "1", s.snapshot(), ""]],
            "sources": [family(kind, source)]}  # fmt: skip


def write(directory: Path, data: dict[str, Any]) -> None:
    counts_path(directory, data["pid"]).write_text(json.dumps(data))


def success_count(entries: list[dict[str, Any]]) -> int:
    return sum(e["inference_stats"]["success"]["count"] for e in entries)


def test_a_dead_workers_counts_are_kept_once(tmp_path: Path) -> None:
    mine = CountsFile(tmp_path, lambda: counts(0, 1))
    saved = mine.save()
    assert saved["pid"] == os.getpid() and counts_path(tmp_path, os.getpid()).is_file()

    write(tmp_path, counts(101, 3, 2.0))  # a peer that died
    write(tmp_path, counts(102, 5, 4.0))  # a peer that answers
    live = counts(102, 6, 5.0)  # it counted more since its file
    others = mine.others([live])
    assert sorted(success_count(c["stats"]) for c in others) == [0, 3, 6]  # retired (none yet), 101's file, 102 live

    retire(tmp_path, 101)
    assert not counts_path(tmp_path, 101).exists()
    others = mine.others([live])
    assert sorted(success_count(c["stats"]) for c in others) == [3, 6]

    # 102 answered, then died and was retired before the asker read the totals: counted once, retired.
    write(tmp_path, counts(102, 7, 6.0))
    retire(tmp_path, 102)
    others = mine.others([live])
    assert [success_count(c["stats"]) for c in others] == [10]
    (retired,) = others
    assert retired["pids"] == [101, 102]
    assert merge.snapshots([retired["snapshots"]])[("m", "1", "")]["durations"]["success"][0] == 10
    assert retired["sources"] == [["custom", "counter", "help", [["custom_total", {"m": "a"}, 8.0]]]]
    retire(tmp_path, 999)  # never reported: nothing to add
    assert mine.others([])[0]["pids"] == [101, 102]


def test_retired_statistics_sum_like_one_process() -> None:
    a, b, both = stats(2, 1), stats(3, 2), stats(5, 3)
    (summed,) = merge.add_statistics([a.as_dict()], [b.as_dict()])
    expected = both.as_dict()
    summed.pop("last_inference"), expected.pop("last_inference")
    assert summed == expected
    other = ModelStats("n", "1").as_dict()
    assert [e["name"] for e in merge.add_statistics([a.as_dict()], [other])] == ["m", "n"]


def test_sources_sum_counters_and_histograms_and_drop_gauges() -> None:
    histogram = ["h", "histogram", "", [["h_bucket", {"le": "1"}, 1.0], ["h_count", {}, 1.0], ["h_sum", {}, 0.5]]]
    added = merge.add_sources([family("counter", 1.0), family("gauge", 9.0), histogram],
                              [family("counter", 2.0), histogram])  # fmt: skip
    assert added == [
        ["custom", "counter", "help", [["custom_total", {"m": "a"}, 3.0]]],
        ["h", "histogram", "", [["h_bucket", {"le": "1"}, 2.0], ["h_count", {}, 2.0], ["h_sum", {}, 1.0]]],
    ]


def test_only_a_dead_supervisors_directory_is_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"inferd-workers-{int(dead.stdout)}-abc_12"
    live = tmp_path / f"inferd-workers-{os.getpid()}-def34"
    old_style = tmp_path / "inferd-workers-k2j3h4"  # before the pid was in the name: unknown owner, kept
    for path in (stale, live, old_style):
        path.mkdir()
    (stale / "worker-0.sock").write_text("")
    assert remove_stale_directories(tmp_path) == [stale]
    assert not stale.exists() and live.is_dir() and old_style.is_dir()


def test_worker_sockets_fit_even_under_a_long_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_dir = tmp_path / ("x" * 80)
    long_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_dir))
    assert socket_parent() == Path("/tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert socket_parent() == (tmp_path if len(str(tmp_path)) <= 60 else Path("/tmp"))
    # The longest socket path the supervisor makes fits in sun_path (108 bytes with its NUL).
    parent = socket_parent()
    longest = parent / f"inferd-workers-{2**22}-abcdefgh" / "worker-999.sock"
    assert len(os.fsencode(longest)) < 108
