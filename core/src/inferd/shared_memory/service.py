"""The shared-memory extension's control calls, over every worker of the server.

With ``--workers N`` each worker is its own process with its own mappings: a registration is
applied here and then on every other worker (over the workers' control sockets, as model loads
and settings are), so a request may carry a region to whichever worker takes it. A worker that
restarts registers what the running ones have (:meth:`SharedMemory.catch_up`).
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any, Protocol

from inferd.contracts.errors import InferdError, InvalidArgument, Unsupported
from inferd.shared_memory import cuda
from inferd.shared_memory.registry import Regions

log = logging.getLogger(__name__)

#: Triton's answer (2.69+) to a register or unregister call while ``--allow-client-shm`` is false.
CLIENT_SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


class PeerAsker(Protocol):
    """The other workers (``inferd.workers.peers.Peers``)."""

    async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]: ...


class SharedMemory:
    """System and CUDA shared-memory regions of the server: :attr:`regions` is this worker's."""

    #: The control operation peers answer with :meth:`apply_locally`.
    OP = "shared_memory"

    def __init__(self, peers: PeerAsker | None = None) -> None:
        self.regions = Regions()
        self.peers = peers
        #: ``--allow-client-shm``: clients may register and unregister regions.
        self.allow_clients = True

    def check_allowed(self) -> None:
        """Refuse a client's register or unregister call while ``--allow-client-shm`` is false
        (Triton's sentence, UNSUPPORTED: HTTP 501, gRPC UNIMPLEMENTED), before its body is read."""
        if not self.allow_clients:
            raise Unsupported(CLIENT_SHM_DISABLED)

    def extensions(self) -> list[str]:
        """The extensions to list in server metadata: CUDA only where it can work."""
        return ["system_shared_memory"] + ([] if cuda.unusable_reason() else ["cuda_shared_memory"])

    async def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.check_allowed()
        self.regions.register_system(name, key, offset, byte_size)
        await self._everywhere("system", name, {"action": "register", "kind": "system", "name": name, "key": key,
                                          "offset": offset, "byte_size": byte_size})  # fmt: skip

    async def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self.check_allowed()
        self.regions.register_cuda(name, raw_handle, device_id, byte_size)
        handle = base64.b64encode(raw_handle).decode()
        await self._everywhere("cuda", name, {"action": "register", "kind": "cuda", "name": name, "raw_handle": handle,
                                        "device_id": device_id, "byte_size": byte_size})  # fmt: skip

    async def unregister(self, kind: str, name: str = "") -> None:
        self.check_allowed()
        self.regions.unregister(kind, name)
        if self.peers is not None:
            await self.peers.ask_each(self.OP, {"action": "unregister", "kind": kind, "name": name})

    def status(self, kind: str, name: str = "") -> list[dict[str, Any]]:
        return self.regions.status(kind, name)

    async def _everywhere(self, kind: str, name: str, args: dict[str, Any]) -> None:
        """Apply a registration made here on every peer (asked at once, without blocking the event
        loop: a stopped peer is left out after a short wait); if one refuses, undo it everywhere."""
        if self.peers is None:
            return
        try:
            await self.peers.ask_each(self.OP, args)
        except InferdError:
            await self.unregister(kind, name)
            raise

    # -- workers ----------------------------------------------------------------------------------

    def apply_locally(self, args: dict[str, Any]) -> None:
        """A peer's registration or unregistration, applied to this worker's regions."""
        kind = args["kind"]
        if args["action"] == "unregister":
            self.regions.unregister(kind, args["name"])
        elif kind == "system":
            self.regions.register_system(args["name"], args["key"], args["offset"], args["byte_size"])
        else:
            handle = base64.b64decode(args["raw_handle"])
            self.regions.register_cuda(args["name"], handle, args["device_id"], args["byte_size"])

    def local_state(self) -> list[dict[str, Any]]:
        """This worker's regions, as :meth:`apply_locally` registers them."""
        return [{"action": "register", **entry} for entry in self.regions.snapshot()]

    def catch_up(self, state: list[dict[str, Any]]) -> None:
        """Register what a running worker has (this one just restarted)."""
        for args in state:
            try:
                self.apply_locally(args)
            except InferdError as exc:
                log.warning("could not register shared memory region '%s' as the running workers have it: %s",
                            args.get("name"), exc.message)  # fmt: skip


def register_request(body: Any, kind: str) -> dict[str, Any]:
    """The fields of an HTTP register request body for ``kind``, checked (Triton's messages)."""
    if not isinstance(body, dict):
        raise InvalidArgument("Shared memory register request must be a JSON object")
    fields = ("key", "byte_size") if kind == "system" else ("raw_handle", "device_id", "byte_size")
    for field in fields:
        if field not in body:
            raise InvalidArgument(f"Shared memory register request has no '{field}' field")
    out: dict[str, Any] = {"byte_size": _unsigned(body, "byte_size")}
    if kind == "system":
        if not isinstance(body["key"], str):
            raise InvalidArgument("Shared memory register request: 'key' must be a string")
        out["key"] = body["key"]
        out["offset"] = _unsigned(body, "offset") if "offset" in body else 0
        return out
    out["device_id"] = _unsigned(body, "device_id")
    out["raw_handle"] = raw_handle(body["raw_handle"])
    return out


def raw_handle(value: Any) -> bytes:
    """A CUDA IPC handle as HTTP carries it: ``{"b64": "<base64>"}``."""
    text = value.get("b64") if isinstance(value, dict) else None
    try:
        if not isinstance(text, str):
            raise ValueError
        handle = base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t") from None
    if len(handle) != cuda.IPC_HANDLE_SIZE:
        raise InvalidArgument("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return handle


def _unsigned(body: dict[str, Any], field: str) -> int:
    value = body[field]
    if type(value) is not int or value < 0:
        raise InvalidArgument(f"Shared memory register request: '{field}' must be an unsigned integer, got {value!r}")
    return value
