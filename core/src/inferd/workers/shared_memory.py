"""The shared-memory extensions over every worker of ``inferd serve --workers N``.

Each worker is its own process with its own mappings: a registration is applied here and then on
every other worker (over the workers' control sockets, as model loads and settings are), so a
request may carry a region to whichever worker takes it. A worker that restarts registers what the
running ones have (:meth:`ClusterSharedMemory.catch_up`).
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Protocol

from inferd.contracts.errors import InferdError
from inferd.shared_memory import SharedMemory

log = logging.getLogger(__name__)


class PeerAsker(Protocol):
    """The other workers (``inferd.workers.peers.Peers``)."""

    async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]: ...


class ClusterSharedMemory(SharedMemory):
    """:class:`SharedMemory` whose changes are applied on every other worker too."""

    #: The control operation peers answer with :meth:`apply`.
    OP = "shared_memory"

    def __init__(self, peers: PeerAsker) -> None:
        super().__init__()
        self.peers = peers

    async def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await super().register_system(name, key, offset, byte_size)
        await self._everywhere(
            "system",
            name,
            {
                "action": "register",
                "kind": "system",
                "name": name,
                "key": key,
                "offset": offset,
                "byte_size": byte_size,
            },
        )

    async def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        await super().register_cuda(name, raw_handle, device_id, byte_size)
        handle = base64.b64encode(raw_handle).decode()
        await self._everywhere(
            "cuda",
            name,
            {
                "action": "register",
                "kind": "cuda",
                "name": name,
                "raw_handle": handle,
                "device_id": device_id,
                "byte_size": byte_size,
            },
        )

    async def unregister(self, kind: str, name: str = "") -> None:
        await super().unregister(kind, name)
        await self.peers.ask_each(self.OP, {"action": "unregister", "kind": kind, "name": name})

    async def _everywhere(self, kind: str, name: str, args: dict[str, Any]) -> None:
        """Apply a registration made here on every peer (asked at once, without blocking the event
        loop: a stopped peer is left out after a short wait); if one refuses, undo it everywhere."""
        try:
            await self.peers.ask_each(self.OP, args)
        except InferdError:
            await self.unregister(kind, name)
            raise

    def apply(self, args: dict[str, Any]) -> None:
        """A peer's registration or unregistration, applied to this worker's regions."""
        kind = args["kind"]
        if args["action"] == "unregister":
            self.regions.unregister(kind, args["name"])
        elif kind == "system":
            self.regions.register_system(args["name"], args["key"], args["offset"], args["byte_size"])
        else:
            handle = base64.b64decode(args["raw_handle"])
            self.regions.register_cuda(args["name"], handle, args["device_id"], args["byte_size"])

    def state(self) -> list[dict[str, Any]]:
        """This worker's regions, as :meth:`apply` registers them."""
        return [{"action": "register", **entry} for entry in self.regions.snapshot()]

    def catch_up(self, state: list[dict[str, Any]]) -> None:
        """Register what a running worker has (this one just restarted)."""
        for args in state:
            try:
                self.apply(args)
            except InferdError as exc:
                log.warning(
                    "could not register shared memory region '%s' as the running workers have it: %s",
                    args.get("name"),
                    exc.message,
                )
