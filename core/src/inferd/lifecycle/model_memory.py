"""What each loaded model holds: the growth of the serving process's resident memory over its load,
plus what its versions report that the process's RSS cannot show (``Model.memory_usage``, plugin
API 1.2): resident memory of other processes (a process-isolated model's stubs) and device memory.

A model's budget footprint is its RSS growth plus its reported host bytes; what it holds on each
device counts against ``--model-device-memory-budget``. The reports are read after the load and
again when the budget is about to choose models to evict (``Model.memory_usage`` is cheap by
contract). What a model last held on a device is kept after it unloads: its next load expects it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from inferd.contracts.backend import MemoryUsage, Model

log = logging.getLogger(__name__)


class _Version(Protocol):
    model: Model | None


class ModelMemory:
    """The memory of each loaded model, by key."""

    def __init__(self) -> None:
        #: The process's RSS growth over each model's last load.
        self.rss: dict[str, int] = {}
        #: Resident bytes its versions report outside the process (``MemoryUsage.host_bytes``).
        self.host: dict[str, int] = {}
        #: Bytes its versions report on each device.
        self.device: dict[str, dict[str, int]] = {}
        #: What each model last held on each device, kept once it unloads (what its next load expects).
        self.last_device: dict[str, dict[str, int]] = {}
        self._complained: set[str] = set()

    def loaded(self, key: str, grown: int, versions: Iterable[_Version]) -> int:
        """After ``key``'s load: remember its RSS growth and read its versions' reports; returns its footprint."""
        self.rss[key] = grown
        return self.read(key, versions)

    def read(self, key: str, versions: Iterable[_Version]) -> int:
        """Read the reports of ``key``'s serving versions again; returns its footprint."""
        host, device = 0, Counter[str]()
        for version in versions:
            usage = self._usage(key, version.model)
            if usage is not None:
                host += max(0, int(usage.host_bytes))
                device.update({d: max(0, int(n)) for d, n in usage.device_bytes.items()})
        self.host[key] = host
        self.device[key] = {d: n for d, n in device.items() if n}
        if self.device[key]:
            self.last_device[key] = self.device[key]
        return self.footprint(key)

    def _usage(self, key: str, model: Model | None) -> MemoryUsage | None:
        if model is None:
            return None
        try:
            usage = model.memory_usage()
        except Exception as exc:  # a plugin's bug: the budget goes on without its report
            if key not in self._complained:
                self._complained.add(key)
                log.warning("model '%s': memory_usage() failed (%s); its report is left out", key, _why(exc))
            return None
        return usage if isinstance(usage, MemoryUsage) else None

    def footprint(self, key: str) -> int:
        """What ``key`` holds of the host's memory: its RSS growth and the host bytes it reports."""
        return self.rss.get(key, 0) + self.host.get(key, 0)

    def forget(self, key: str) -> None:
        """``key`` unloaded (what it last held on each device is kept)."""
        self.rss.pop(key, None)
        self.host.pop(key, None)
        self.device.pop(key, None)

    def device_used(self) -> dict[str, int]:
        """What the loaded models hold on each device together, as they last reported."""
        used = Counter[str]()
        for sizes in self.device.values():
            used.update(sizes)
        return dict(used)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
