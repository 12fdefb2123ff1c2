"""The poller's debounce on real files: it waits for quiet, for two agreeing scans, and rescans
periodically when no file-system event comes. Timings are short but the assertions hold on a
slow machine: each waits for an outcome instead of sleeping a fixed time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

from inferd.lifecycle.poller import RepositoryPoller
from inferd.repository.scan import RepositoryDiff, Snapshot, fingerprint, scan

CONFIG = 'name: "m"\nbackend: "python"\nmax_batch_size: 4\n'


class Recorder:
    """The lifecycle side of the poller: real scans of ``repo``, applied diffs recorded."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.snapshot = scan([repo])
        self.applied: list[tuple[float, Snapshot, RepositoryDiff]] = []
        self.scans = 0
        self.after_scan: Callable[[int], None] = lambda n: None

    def rescan(self, reuse: bool = True) -> Snapshot:
        snapshot = scan([self.repo], previous=self.snapshot if reuse else None)
        self.scans += 1
        self.after_scan(self.scans)
        return snapshot

    async def apply(self, snapshot: Snapshot, changes: RepositoryDiff) -> None:
        self.snapshot = snapshot
        self.applied.append((time.monotonic(), snapshot, changes))


async def until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def poll(recorder: Recorder, body, *, watch: bool, poll_secs: float, settle_secs: float) -> None:
    poller = RepositoryPoller(recorder, [recorder.repo], poll_secs, settle_secs)
    if watch:
        poller.watch()
    task = asyncio.get_running_loop().create_task(poller.run())
    try:
        await body()
    finally:
        task.cancel()
        poller.stop()


def test_a_model_being_copied_loads_once_when_the_tree_has_been_quiet(tmp_path):
    model = tmp_path / "m"
    (model / "1").mkdir(parents=True)  # before watching: watchdog races on new nested folders
    recorder = Recorder(tmp_path)
    finished: list[float] = []

    def copy_slowly() -> None:  # one file every 20 ms for about a second; settle is 0.5 s
        (model / "config.pbtxt").write_text(CONFIG)
        for i in range(50):
            (model / "1" / f"part{i}").write_bytes(b"x" * i)
            time.sleep(0.02)
        finished.append(time.monotonic())

    async def body() -> None:
        writer = threading.Thread(target=copy_slowly)
        writer.start()
        await until(lambda: bool(recorder.applied))
        await asyncio.to_thread(writer.join)
        await asyncio.sleep(1.5)  # long enough for a second apply, were one coming

    asyncio.run(poll(recorder, body, watch=True, poll_secs=60, settle_secs=0.5))
    assert len(recorder.applied) == 1
    applied_at, snapshot, changes = recorder.applied[0]
    assert applied_at > finished[0]
    assert (changes.added, changes.removed, changes.modified) == ([], [], ["m"])
    assert snapshot.models["m"].fingerprint == fingerprint(model)
    assert snapshot.models["m"].config.max_batch_size == 4


def test_nothing_is_applied_until_two_scans_in_a_row_agree(tmp_path):
    # No observer: the files written during the scans are seen by scanning alone, as on a
    # network mount. The first three scans each find the tree changed since the one before.
    recorder = Recorder(tmp_path)
    model = tmp_path / "m"
    model.mkdir()

    def keep_copying(n: int) -> None:
        if n <= 3:
            (model / f"part{n}").write_text("x" * n)

    recorder.after_scan = keep_copying

    async def body() -> None:
        (model / "config.pbtxt").write_text(CONFIG)
        await until(lambda: bool(recorder.applied))

    asyncio.run(poll(recorder, body, watch=False, poll_secs=0.2, settle_secs=0.05))
    _, snapshot, changes = recorder.applied[0]
    assert changes.added == ["m"]
    assert recorder.scans >= 5  # scans 1-4 differ from their predecessor; 5 agrees with 4
    assert sorted(p.name for p in model.iterdir()) == ["config.pbtxt", "part1", "part2", "part3"]
    assert snapshot.models["m"].fingerprint == fingerprint(model)


def test_the_periodic_rescan_sees_changes_without_file_system_events(tmp_path):
    recorder = Recorder(tmp_path)
    model = tmp_path / "m"

    async def body() -> None:
        await until(lambda: recorder.scans >= 4)  # nothing changed: scans, but no apply
        assert recorder.applied == []
        model.mkdir()
        (model / "config.pbtxt").write_text(CONFIG)
        await until(lambda: len(recorder.applied) == 1)
        (model / "config.pbtxt").write_text(CONFIG.replace("4", "16"))
        await until(lambda: len(recorder.applied) == 2)

    asyncio.run(poll(recorder, body, watch=False, poll_secs=0.1, settle_secs=0.05))
    (_, first, added), (_, second, modified) = recorder.applied
    assert added.added == ["m"] and first.models["m"].config.max_batch_size == 4
    assert (modified.added, modified.removed, modified.modified) == ([], [], ["m"])
    assert second.models["m"].config.max_batch_size == 16
