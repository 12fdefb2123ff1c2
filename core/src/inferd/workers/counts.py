"""Counters that outlive a worker, so that sums over the workers never go down.

With ``--workers N`` statistics and Prometheus counters are summed over the workers. A worker
that dies would take its part of the sum with it (Prometheus would see a counter reset), and a
worker that stops answering (stopped, wedged) would drop out of it. So:

- a worker writes its counters to ``counts-<pid>.json`` in the worker directory *before* it
  reports them, to a client or to a peer (:meth:`CountsFile.save`): the file never holds less than
  what anyone was told;
- when a worker dies, the supervisor adds its file to ``retired.json`` and removes the file
  (:func:`retire`);
- a worker answering a sum adds to its own counters each peer's live answer, the file of each
  peer that did not answer, and the retired totals (:func:`others`).

Counts are ``{"pid", "stats", "snapshots", "sources", "live"}``: the worker's ``model_stats`` entries,
its metric snapshots (``[name, version, snapshot, namespace]`` rows) and its plugins' metric families. Only
counters are summed (see :mod:`inferd.workers.merge`); gauges are the answering worker's, except
what ``live`` holds (queued requests, plugins' gauges), which the metrics frontend adds up from the
workers that answered (a worker's file keeps no ``live``: a silent worker's queue is not now's).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inferd.workers import merge

log = logging.getLogger(__name__)

Counts = dict[str, Any]

RETIRED = "retired.json"
_FILE = re.compile(r"^counts-(\d+)\.json$")


def counts_path(directory: Path, pid: int) -> Path:
    return directory / f"counts-{pid}.json"


def _write(path: Path, data: Any) -> None:
    """Replace ``path`` at once (readers see the old file or the new one, never part of one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


class CountsFile:
    """This worker's ``counts-<pid>.json``; ``collect()`` gives its counters now."""

    def __init__(self, directory: Path, collect: Callable[[], Counts]) -> None:
        self.directory = directory
        self.collect = collect
        self.pid = os.getpid()
        self.path = counts_path(directory, self.pid)
        self._lock = threading.Lock()  # a later collect is never overwritten by an earlier one

    def save(self) -> Counts:
        """Collect, write and return this worker's counters (blocking: file I/O)."""
        with self._lock:
            counts = {**self.collect(), "pid": self.pid}
            _write(self.path, counts)
        return counts

    def others(self, answers: list[Counts]) -> list[Counts]:
        """The other workers' counters: ``answers`` (the live peers'), the last file of every other
        worker that did not answer, and the dead workers' totals (blocking: file I/O)."""
        for _ in range(5):
            retired = _retired(self.directory)
            folded = set(retired["pids"])
            answered = {a["pid"] for a in answers}
            out = [a for a in answers if a["pid"] not in folded] + [retired]
            try:
                for path in self.directory.iterdir():
                    match = _FILE.match(path.name)
                    pid = int(match.group(1)) if match else None
                    if pid is not None and pid != self.pid and pid not in answered and pid not in folded:
                        silent = _read(path)
                        silent.pop("live", None)  # what it held when it last answered: not now
                        out.append(silent)
                return out
            except FileNotFoundError:  # retired since retired.json was read: read it again
                continue
        log.warning("worker counters kept changing while read; a dead worker's counts may be missing")
        return out


def _retired(directory: Path) -> Counts:
    try:
        return _read(directory / RETIRED)
    except FileNotFoundError:
        return {"pids": [], "stats": [], "snapshots": [], "sources": []}


def retire(directory: Path, pid: int) -> None:
    """The supervisor's part: worker ``pid`` is dead; add its last counters to the retired totals."""
    path = counts_path(directory, pid)
    try:
        dead = _read(path)
    except FileNotFoundError:
        return  # it never reported any counters
    except ValueError as exc:  # cannot happen (files are replaced whole); keep the old totals
        log.error("counters of worker (pid %d) unreadable, left out: %s", pid, exc)
        path.unlink(missing_ok=True)
        return
    retired = _retired(directory)
    _write(
        directory / RETIRED,
        {
            "pids": [*retired["pids"], pid],
            "stats": merge.add_statistics(retired["stats"], dead["stats"]),
            "snapshots": merge.add_snapshot_rows(retired["snapshots"], dead["snapshots"]),
            "sources": merge.add_sources(retired["sources"], dead["sources"]),
        },
    )
    path.unlink()
