"""What the rest of the server asks about ``--workers``: one object, chosen once when a server is built.

:func:`membership` gives :class:`Alone` for a server of one process and :class:`Worker` for one
worker of ``inferd serve --workers N``; the server calls the same methods on either (its data
plane, shared memory, control socket, catch-up, who polls), so no ``if worker`` is needed outside
this package.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from inferd.contracts.backend import process_cores
from inferd.shared_memory import SharedMemory
from inferd.workers.cluster import ClusterDataPlane
from inferd.workers.control import ControlServer
from inferd.workers.local import WorkerOps
from inferd.workers.peers import Peers, WorkerSlot
from inferd.workers.repositories import SharedRepositories
from inferd.workers.shared_memory import ClusterSharedMemory

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.dataplane import LocalDataPlane
    from inferd.lifecycle.manager import ModelManager
    from inferd.lifecycle.poller import Repositories

log = logging.getLogger(__name__)


class Alone:
    """A server of one serving process: nothing spans anything."""

    index = 0
    count = 1
    #: Frontends bind their ports for this process alone.
    shares_ports = False

    def cores(self) -> int:
        """The cores this process's instances may use."""
        return process_cores(1)

    def shared_memory(self) -> SharedMemory:
        return SharedMemory()

    def dataplane(self, local: LocalDataPlane) -> DataPlane:
        """What frontends receive."""
        return local

    def start_control(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer the other workers (none)."""

    def stop_control(self) -> None:
        pass

    async def catch_up(self) -> bool:
        """Take what running workers have (none: the server is starting)."""
        return False

    async def poll_target(self, manager: ModelManager, restarted: bool) -> Repositories | None:
        """What the repository poller applies changes through (None: this process runs no poller)."""
        return manager


class Worker(Alone):
    """Worker ``slot.index`` of ``slot.count``: its peers on the control sockets in ``slot.directory``."""

    shares_ports = True

    def __init__(self, slot: WorkerSlot) -> None:
        self.slot = slot
        self.index = slot.index
        self.count = slot.count
        self.peers = Peers(slot)
        self.shm = ClusterSharedMemory(self.peers)
        self.cluster: ClusterDataPlane | None = None
        self.control: ControlServer | None = None

    def cores(self) -> int:
        return process_cores(self.count)

    def shared_memory(self) -> SharedMemory:
        return self.shm

    def dataplane(self, local: LocalDataPlane) -> DataPlane:
        """The local plane spanning the other workers; the canary policy's changes are sent to them."""
        self.cluster = cluster = ClusterDataPlane(local, self.peers, self.shm)
        local.table.traffic.listeners.append(cluster.send_traffic)
        return cluster

    def start_control(self, loop: asyncio.AbstractEventLoop) -> None:
        """Answer the other workers on this worker's control socket."""
        assert self.cluster is not None
        self.control = ControlServer(self.slot.socket(self.index), WorkerOps(self.cluster, loop))
        self.control.start()
        log.info("worker %d of %d (pid %d)", self.index, self.count, os.getpid())

    def stop_control(self) -> None:
        if self.control is not None:
            self.control.stop()

    async def catch_up(self) -> bool:
        assert self.cluster is not None
        return await self.cluster.catch_up()

    async def poll_target(self, manager: ModelManager, restarted: bool) -> Repositories | None:
        """Worker 0 polls for every worker (a restarted worker 0 has the others rescan first)."""
        if self.index != 0:
            return None
        shared = SharedRepositories(manager, self.peers)
        if restarted:
            await shared.resync_peers()
        return shared


def membership(slot: WorkerSlot | None) -> Alone:
    """:class:`Worker` for a worker of ``--workers N`` (its ``slot``), else :class:`Alone`."""
    return Worker(slot) if slot is not None else Alone()
