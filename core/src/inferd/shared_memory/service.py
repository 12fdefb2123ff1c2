"""The shared-memory extension's control calls (register, unregister, status) of one serving process."""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from inferd.contracts.errors import InvalidArgument, Unsupported
from inferd.shared_memory import cuda
from inferd.shared_memory.registry import Regions

log = logging.getLogger(__name__)

#: Triton's answer (2.69+) to a register or unregister call while ``--allow-client-shm`` is false.
CLIENT_SHM_DISABLED = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."


class SharedMemory:
    """System and CUDA shared-memory regions of this serving process (:attr:`regions`). With
    ``--workers N`` the workers' decorator (``inferd.workers.shared_memory``) applies each change on
    every worker too."""

    def __init__(self) -> None:
        self.regions = Regions()
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

    async def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self.check_allowed()
        self.regions.register_cuda(name, raw_handle, device_id, byte_size)

    async def unregister(self, kind: str, name: str = "") -> None:
        self.check_allowed()
        self.regions.unregister(kind, name)

    def status(self, kind: str, name: str = "") -> list[dict[str, Any]]:
        return self.regions.status(kind, name)


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
