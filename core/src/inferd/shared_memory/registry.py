"""The regions registered with one serving process, by name (system and CUDA share one namespace,
as in Triton)."""

from __future__ import annotations

import base64
import threading
from typing import Any, Protocol

from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument, NotFound
from inferd.repository.names import name_problem, shown
from inferd.shared_memory.cuda import CudaRegion
from inferd.shared_memory.system import SystemRegion


class Sink(Protocol):
    """Where one output's bytes go."""

    def write(self, data: bytes | memoryview) -> None:
        """Copy ``data`` (at most the bytes the client set aside) into the region."""
        ...


class Region(Protocol):
    """A registered region: ``byte_size`` bytes the server reads inputs from and writes outputs to."""

    kind: str
    name: str
    byte_size: int

    def status(self) -> dict[str, Any]: ...
    def input(self, offset: int, byte_size: int) -> memoryview: ...
    def output(self, offset: int, byte_size: int) -> Sink: ...
    def close(self) -> None: ...


class Regions:
    """Register, look up, list and unregister regions. Lookups take no lock (one dict read);
    changes do, since peers' changes arrive on the control thread."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._regions)

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        with self._lock:
            self._check_free(name)
            self._regions[name] = SystemRegion(name, key, offset, byte_size)

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        with self._lock:
            self._check_free(name)
            self._regions[name] = CudaRegion(name, raw_handle, device_id, byte_size)

    def _check_free(self, name: str) -> None:
        """Refuse a name that is taken, or that is no name (``inferd.repository.names``)."""
        problem = name_problem(name)
        if problem:
            raise InvalidArgument(
                f"failed to register shared memory region '{shown(name)}'; the name is not valid: {problem}"
            )
        if name in self._regions:
            raise InferdError(f"shared memory region '{name}' already in manager", ErrorKind.ALREADY_EXISTS)

    def unregister(self, kind: str, name: str = "") -> None:
        """Unregister region ``name`` of ``kind``, or every region of ``kind``; an unknown name is
        no error (as in Triton). A request in flight keeps what it already holds."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for n in names:
                region = self._regions.get(n)
                if region is not None and region.kind == kind:
                    del self._regions[n]
                    region.close()

    def status(self, kind: str, name: str = "") -> list[dict[str, Any]]:
        """Triton's status list: every region of ``kind``, or region ``name``."""
        if not name:
            return [r.status() for r in list(self._regions.values()) if r.kind == kind]
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find {kind} shared memory region: '{name}'")
        if region.kind != kind:
            other = "CUDA" if region.kind == "cuda" else "system"
            mine = "CUDA" if kind == "cuda" else "system"
            raise NotFound(
                f"The region named '{name}' is registered as {other} shared memory, not {mine} shared memory"
            )
        return [region.status()]

    def checked(self, name: str, offset: int, byte_size: int) -> Region:
        """Region ``name``, once ``byte_size`` bytes at ``offset`` are known to lie inside it."""
        region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        if offset > max(region.byte_size - 1, 0):
            raise InvalidArgument(f"Invalid offset for shared memory region: '{name}'")
        if byte_size == 0 or offset + byte_size > region.byte_size:
            raise InvalidArgument(
                f"Invalid offset + byte size for shared memory region: '{name}'; {byte_size} bytes at offset "
                f"{offset} do not fit in its {region.byte_size} bytes"
            )
        return region

    def snapshot(self) -> list[dict[str, Any]]:
        """What registers every region again (for a restarted worker): its status entry, its
        ``kind`` and, for CUDA, its IPC handle (base64)."""
        out = []
        for region in list(self._regions.values()):
            entry = {"kind": region.kind, **region.status()}
            if isinstance(region, CudaRegion):
                entry["raw_handle"] = base64.b64encode(region.raw_handle).decode()
            out.append(entry)
        return out
