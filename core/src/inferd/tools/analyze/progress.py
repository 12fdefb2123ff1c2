"""The sweep's point counter: ``[3/24, about 1 min 12 s left]`` before each measured point's line,
the time left estimated from the points measured so far (loads and restarts included)."""

from __future__ import annotations

import time


def duration(seconds: float) -> str:
    """``1 h 02 min``, ``1 min 12 s``, ``9 s``."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class PointCounter:
    """Counts the (candidate, batch size, concurrency) points of a sweep as they are measured or skipped."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()

    def skip(self, points: int) -> None:
        """Points that will not be measured (their candidate failed to load), out of the count."""
        self.total -= points

    def step(self) -> str:
        """One more point measured: ``[done/total, about ... left]`` (no estimate after the last)."""
        self.done += 1
        left = self.total - self.done
        if left <= 0:
            return f"[{self.done}/{self.total}]"
        per_point = (time.monotonic() - self.started) / self.done
        return f"[{self.done}/{self.total}, about {duration(per_point * left)} left]"
