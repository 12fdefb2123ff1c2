"""Poll mode with ``--workers N``: worker 0 watches the repositories; every worker applies a change.

Worker 0 runs the :class:`~inferd.lifecycle.poller.RepositoryPoller` on a :class:`SharedRepositories`: when
its scans have settled on a change, it applies the change and, at the same time, asks every other
worker to rescan and apply what it finds (the same files, already settled). The others run no
poller, so all workers change together rather than each on its own poll.
"""

from __future__ import annotations

import asyncio
import logging

from inferd.lifecycle.manager import ModelManager
from inferd.repository.scan import RepositoryDiff, Snapshot, diff
from inferd.workers.peers import Peers

log = logging.getLogger(__name__)


async def rescan_and_apply(manager: ModelManager) -> None:
    """What a worker does when worker 0 saw a change: scan, diff against its own state, apply."""
    snapshot = await asyncio.to_thread(manager.rescan)
    changes = diff(manager.snapshot, snapshot)
    if changes or snapshot.stale != manager.snapshot.stale:
        await manager.apply(snapshot, changes)


class SharedRepositories:
    """The poller's view of the repositories on worker 0: applying a change applies it everywhere."""

    def __init__(self, manager: ModelManager, peers: Peers) -> None:
        self.manager = manager
        self.peers = peers

    @property
    def snapshot(self) -> Snapshot:
        return self.manager.snapshot

    def rescan(self, reuse: bool = True) -> Snapshot:
        return self.manager.rescan(reuse)

    async def apply(self, snapshot: Snapshot, changes: RepositoryDiff) -> None:
        mine, theirs = await asyncio.gather(
            self.manager.apply(snapshot, changes), self.peers.ask_all("rescan", {}), return_exceptions=True
        )
        for error in theirs if isinstance(theirs, list) else [theirs]:
            if error is not None:
                log.warning("a worker did not apply the repository change: %s", error)
        if isinstance(mine, BaseException):
            raise mine

    async def resync_peers(self) -> None:
        """Worker 0 restarted: bring the others to what the repositories hold now."""
        for error in await self.peers.ask_all("rescan", {}):
            if error is not None:
                log.warning("a worker did not rescan the repositories: %s", error)
