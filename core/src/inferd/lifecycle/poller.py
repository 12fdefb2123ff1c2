"""``--model-control-mode=poll``: watch the repositories and apply what changed.

A watchdog observer only says "something changed". The poller then waits until the tree has been
quiet for ``settle_secs`` and two scans agree (so a half-copied model is not loaded), diffs the
new snapshot against the last one, and hands the diff to the lifecycle. A periodic rescan every
``poll_secs`` catches changes that file-system events miss (network mounts, some editors).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Protocol

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from inferd.repository.scan import Repository, RepositoryDiff, Snapshot, diff

log = logging.getLogger(__name__)


class Repositories(Protocol):
    """What the poller needs of the lifecycle (the ModelManager)."""

    @property
    def snapshot(self) -> Snapshot:
        """The repositories as last applied."""
        ...

    def rescan(self, reuse: bool = True) -> Snapshot:
        """Scan the repositories again (blocking)."""
        ...

    async def apply(self, snapshot: Snapshot, changes: RepositoryDiff) -> None:
        """Load, reload and unload what ``changes`` says; ``snapshot`` becomes the current one."""
        ...


class _Notify(FileSystemEventHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        self._loop = loop
        self._event = event

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        self._loop.call_soon_threadsafe(self._event.set)


class RepositoryPoller:
    """Runs as a task on the server's loop while the server is up."""

    def __init__(
        self, manager: Repositories, repositories: list[Repository], poll_secs: float, settle_secs: float = 0.3
    ) -> None:
        self.manager = manager
        self.repositories = repositories
        self.poll_secs = poll_secs if poll_secs > 0 else 15.0
        self.settle_secs = settle_secs
        self._changed = asyncio.Event()
        self._observer: Observer | None = None  # type: ignore[valid-type]

    def start(self) -> asyncio.Task[None]:
        """Watch the repositories and poll them in a task on the running loop."""
        self.watch()
        return asyncio.get_running_loop().create_task(self.run(), name="inferd-poller")

    def watch(self) -> None:
        """Start the file-system observer; without it only the periodic rescan sees changes."""
        observer = Observer()
        handler = _Notify(asyncio.get_running_loop(), self._changed)
        for repo in self.repositories:
            if isinstance(repo, Path):  # a remote repository is only polled
                observer.schedule(handler, str(repo), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    async def run(self) -> None:
        """Apply each settled change, woken by the observer or every ``poll_secs``; until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=self.poll_secs)
            try:
                await self._settle_and_apply()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("repository poll failed; will retry on the next change")

    async def _settle_and_apply(self) -> None:
        # Wait for quiet: every new event restarts the settle timer.
        while True:
            self._changed.clear()
            await asyncio.sleep(self.settle_secs)
            if not self._changed.is_set():
                break
        snapshot = await asyncio.to_thread(self.manager.rescan)
        while True:  # two scans in a row must agree before anything is loaded
            await asyncio.sleep(self.settle_secs)
            again = await asyncio.to_thread(self.manager.rescan)
            if again == snapshot:
                break
            snapshot = again
        changes = diff(self.manager.snapshot, snapshot)
        if changes:
            log.info(
                "repository changed: added %s, removed %s, modified %s",
                changes.added,
                changes.removed,
                changes.modified,
            )
        if changes or snapshot.stale != self.manager.snapshot.stale:  # a store became (un)readable
            await self.manager.apply(snapshot, changes)
