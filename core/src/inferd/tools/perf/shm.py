"""``--shared-memory system``: request tensors in system shared-memory regions, as perf_analyzer
does. Each input of each data entry gets a region holding its bytes, and each output one region
of ``--output-shared-memory-size`` bytes that every request writes; the regions are registered
with the server before measuring and unregistered and removed after."""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from inferd.tools import ToolError
from inferd.tools.perf.inputs import Entry, raw_bytes
from inferd.tools.perf.model import ModelInfo


@dataclass(frozen=True, slots=True)
class Placed:
    """Where the tensors of one request are: name -> (region name, byte size)."""

    inputs: dict[str, tuple[str, int]]
    outputs: dict[str, tuple[str, int]] = field(default_factory=dict)


class RegionControl(Protocol):
    """The server's shared-memory registration (the transport's control calls)."""

    async def register_region(self, name: str, key: str, byte_size: int) -> None: ...

    async def unregister_region(self, name: str) -> None: ...


class PerfRegions:
    """The regions of one run, made with ``tritonclient.utils.shared_memory``."""

    def __init__(self, output_size: int) -> None:
        import tritonclient.utils.shared_memory as shm

        self._shm = shm
        self.output_size = output_size
        self._names = (f"inferd_perf_{os.getpid()}_{i}" for i in itertools.count())
        #: (region name, key, byte size, handle) of every region made.
        self.made: list[tuple[str, str, int, Any]] = []

    def _region(self, data: bytes | None, size: int) -> str:
        name = next(self._names)
        handle = self._shm.create_shared_memory_region(name, "/" + name, size)
        if data:
            self._shm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)])
        self.made.append((name, "/" + name, size, handle))
        return name

    def place(self, streams: list[list[Entry]], info: ModelInfo) -> list[list[Placed]]:
        """Copy every entry's inputs into regions of their own; one region per output."""
        datatypes = {s.name: s.datatype for s in info.inputs}
        outputs = {o.name: (self._region(None, self.output_size), self.output_size) for o in info.outputs}
        placed = []
        for stream in streams:
            row = []
            for entry in stream:
                inputs = {}
                for name, array in entry.items():
                    data = raw_bytes(array, datatypes[name])
                    inputs[name] = (self._region(data, len(data)), len(data))
                row.append(Placed(inputs, outputs))
            placed.append(row)
        return placed

    async def register(self, server: RegionControl) -> None:
        """Register every region with the server."""
        for name, key, size, _ in self.made:
            await server.register_region(name, key, size)

    async def release(self, server: RegionControl) -> None:
        """Unregister the regions (best effort: the server may be gone) and remove them."""
        for name, _, _, handle in self.made:
            with contextlib.suppress(ToolError):  # the run is over either way
                await server.unregister_region(name)
            self._shm.destroy_shared_memory_region(handle)
        self.made.clear()
