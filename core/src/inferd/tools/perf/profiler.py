"""Measurement windows and stability, as perf_analyzer does them.

A load level runs in windows of ``--measurement-interval`` ms; the level is stable once the last
three windows agree within ``--stability-percentage`` on throughput and on the stabilizing latency
(average, or ``--percentile``). The result merges those three windows (or the last three tried,
marked unstable, after ``--max-trials``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from inferd.tools import ToolError
from inferd.tools.perf.load import Load, Record, Recorder
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.server_stats import ServerStats
from inferd.tools.perf.transport import Transport

log = logging.getLogger(__name__)
STABILITY_WINDOW = 3


@dataclass
class Window:
    """One measurement window: the requests that completed in it and the server's counters."""

    records: list[Record]
    duration_ns: int
    server: ServerStats
    cpu_s: float

    def throughput(self, batch: int) -> float:
        return len(self.records) * batch / (self.duration_ns / 1e9) if self.duration_ns else 0.0

    def latency_us(self, percentile: int | None) -> float:
        if not self.records:
            return 0.0
        lat = np.fromiter((r[2] for r in self.records), np.int64, len(self.records))
        value = lat.mean() if percentile is None else np.percentile(lat, percentile)
        return float(value) / 1000.0


@dataclass
class LevelResult:
    """What perf_analyzer reports for one concurrency or request rate."""

    mode: str  # "concurrency" or "request_rate"
    level: float
    batch_size: int
    request_count: int
    duration_s: float
    throughput: float  # inferences/s = requests x batch / s
    response_throughput: float
    avg_latency_us: float
    percentiles_us: dict[int, float]
    stabilizing_latency_us: float
    avg_request_us: float
    avg_send_us: float
    avg_recv_us: float
    server: ServerStats
    client_cpu_us_per_request: float
    stable: bool
    windows: int
    delayed: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def response_wait_us(self) -> float:
        return max(0.0, self.avg_request_us - self.avg_send_us - self.avg_recv_us)


def stable(windows: list[Window], opts: PerfOptions) -> bool:
    """The last three windows agree within the stability percentage (perf_analyzer's rule)."""
    if len(windows) < STABILITY_WINDOW:
        return False
    last = windows[-STABILITY_WINDOW:]
    limit = 1 + opts.stability_percentage / 100.0
    tput = [w.throughput(opts.batch_size) for w in last]
    lat = [w.latency_us(opts.percentile) for w in last]
    if min(tput) <= 0 or min(lat) <= 0:
        return False
    return max(tput) / min(tput) <= limit and max(lat) / min(lat) <= limit


def merge(
    windows: list[Window], opts: PerfOptions, mode: str, level: float, is_stable: bool, delayed: int
) -> LevelResult:
    """One result from the windows kept."""
    records = [r for w in windows for r in w.records]
    duration_ns = sum(w.duration_ns for w in windows)
    server = ServerStats()
    for w in windows:
        server = server + w.server
    n = len(records)
    arr = np.array(records, dtype=np.int64).reshape(n, 6) if n else np.zeros((0, 6), np.int64)
    lat = arr[:, 2]
    pct = {p: float(np.percentile(lat, p)) / 1000.0 if n else 0.0 for p in opts.percentiles}
    avg_latency = float(lat.mean()) / 1000.0 if n else 0.0
    secs = duration_ns / 1e9 if duration_ns else 1.0
    return LevelResult(
        mode=mode,
        level=level,
        batch_size=opts.batch_size,
        request_count=n,
        duration_s=duration_ns / 1e9,
        throughput=n * opts.batch_size / secs,
        response_throughput=float(arr[:, 5].sum()) / secs,
        avg_latency_us=avg_latency,
        percentiles_us=pct,
        stabilizing_latency_us=avg_latency if opts.percentile is None else pct[opts.percentile],
        avg_request_us=float(arr[:, 1].mean()) / 1000.0 if n else 0.0,
        avg_send_us=float(arr[:, 3].mean()) / 1000.0 if n else 0.0,
        avg_recv_us=float(arr[:, 4].mean()) / 1000.0 if n else 0.0,
        server=server,
        client_cpu_us_per_request=sum(w.cpu_s for w in windows) * 1e6 / n if n else 0.0,
        stable=is_stable,
        windows=len(windows),
        delayed=delayed,
    )


async def measure(
    load: Load, transport: Transport, recorder: Recorder, opts: PerfOptions, mode: str, level: float
) -> LevelResult:
    """Run windows on an already started load until stable or ``--max-trials``, then stop it."""
    interval = opts.measurement_interval_ms / 1000.0
    windows: list[Window] = []
    try:
        before = await transport.stats()
        recorder.swap()
        delayed0 = recorder.delayed
        t_start, cpu_start = time.perf_counter_ns(), time.process_time()
        for trial in range(opts.max_trials):
            await asyncio.sleep(interval)
            records = recorder.swap()
            t_end, cpu_end = time.perf_counter_ns(), time.process_time()
            _raise_if_failed(recorder, mode, level)
            after = await transport.stats()
            windows.append(Window(records, t_end - t_start, after - before, cpu_end - cpu_start))
            before, t_start, cpu_start = after, t_end, cpu_end
            w = windows[-1]
            log.info(
                "  Pass [%d] throughput: %.2f infer/sec. %s latency: %.0f usec",
                trial + 1,
                w.throughput(opts.batch_size),
                _latency_name(opts),
                w.latency_us(opts.percentile),
            )
            if stable(windows, opts):
                break
    finally:
        await load.stop()
    _raise_if_failed(recorder, mode, level)
    is_stable = stable(windows, opts)
    return merge(windows[-STABILITY_WINDOW:], opts, mode, level, is_stable, recorder.delayed - delayed0)


def _latency_name(opts: PerfOptions) -> str:
    return "Avg" if opts.percentile is None else f"p{opts.percentile}"


def _raise_if_failed(recorder: Recorder, mode: str, level: float) -> None:
    if recorder.error is not None:
        what = "concurrency" if mode == "concurrency" else "request rate"
        raise ToolError(f"{what} {level:g}: {recorder.error}")
