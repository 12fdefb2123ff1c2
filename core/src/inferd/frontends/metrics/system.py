"""Per-interval system gauges: CPU from /proc (Linux), GPUs through NVML (``pynvml``, optional)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class CpuSample:
    utilization: float = 0.0
    memory_total: int = 0
    memory_used: int = 0


class CpuMetrics:
    """``nv_cpu_utilization`` (busy share of all cores since the previous update) and RAM."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._last: tuple[int, int] | None = None
        self.sample = CpuSample()
        self.available = self._read_stat() is not None

    def _read_stat(self) -> tuple[int, int] | None:
        """(idle jiffies, total jiffies) of the aggregate "cpu" line."""
        try:
            with open(f"{self.proc}/stat", encoding="ascii") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu":
            return None
        values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
        idle = values[3] + (values[4] if len(values) > 4 else 0)
        return idle, sum(values)

    def _read_meminfo(self) -> tuple[int, int]:
        info: dict[str, int] = {}
        with open(f"{self.proc}/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    info[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
        total = info.get("MemTotal", 0)
        available = info.get("MemAvailable", info.get("MemFree", 0))
        return total, total - available

    def update(self) -> None:
        stat = self._read_stat()
        if stat is not None:
            if self._last is not None:
                idle = stat[0] - self._last[0]
                total = stat[1] - self._last[1]
                if total > 0:
                    self.sample.utilization = max(0.0, min(1.0, (total - idle) / total))
            self._last = stat
        with contextlib.suppress(OSError, ValueError):
            self.sample.memory_total, self.sample.memory_used = self._read_meminfo()


@dataclass
class GpuSample:
    uuid: str
    utilization: float = 0.0
    memory_total: int = 0
    memory_used: int = 0
    power_usage: float = 0.0
    power_limit: float = 0.0
    energy: float = 0.0


@dataclass
class GpuMetrics:
    """``nv_gpu_*`` and ``nv_energy_consumption`` for every GPU NVML sees; empty without one."""

    nvml: Any = None
    handles: list[Any] = field(default_factory=list)
    samples: list[GpuSample] = field(default_factory=list)
    _energy_start: list[float] = field(default_factory=list)

    @classmethod
    def probe(cls, nvml: Any = None) -> GpuMetrics:
        """Initialise NVML if ``pynvml`` imports and a GPU is there; else an empty collector."""
        if nvml is None:
            try:
                import pynvml  # optional: only where NVIDIA's bindings are installed
            except ImportError:
                return cls()
            nvml = pynvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # no driver, no device: GPU metrics are simply absent
            log.debug("no GPU metrics: %s", exc)
            return cls()
        gpus = cls(nvml, handles)
        for h in handles:
            uuid = nvml.nvmlDeviceGetUUID(h)
            gpus.samples.append(GpuSample(uuid.decode() if isinstance(uuid, bytes) else str(uuid)))
            energy_mj = _try(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
            gpus._energy_start.append(energy_mj / 1000.0 if energy_mj is not None else 0.0)
        return gpus

    def update(self) -> None:
        """Read every GPU; a value a device cannot report keeps its previous reading."""
        nvml = self.nvml
        for h, s, e0 in zip(self.handles, self.samples, self._energy_start, strict=True):
            util = _try(nvml.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                s.utilization = util.gpu / 100.0
            mem = _try(nvml.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                s.memory_total, s.memory_used = int(mem.total), int(mem.used)
            power = _try(nvml.nvmlDeviceGetPowerUsage, h)  # milliwatts
            if power is not None:
                s.power_usage = power / 1000.0
            limit = _try(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
            if limit is not None:
                s.power_limit = limit / 1000.0
            energy = _try(nvml.nvmlDeviceGetTotalEnergyConsumption, h)  # millijoules
            if energy is not None:
                s.energy = energy / 1000.0 - e0

    def close(self) -> None:
        if self.nvml is not None:
            _try(self.nvml.nvmlShutdown)
            self.nvml = None


def _try(fn: Any, *args: Any) -> Any:
    """An NVML call, or None when the device does not support it."""
    try:
        return fn(*args)
    except Exception:
        return None
