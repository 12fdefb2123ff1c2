"""When an isolated instance whose stub process died starts a new one.

A crash is counted, and the stub restarted after a delay that starts at :data:`BACKOFF_S` and
doubles with each crash within ``RESTART_WINDOW_SECS`` (at most :data:`BACKOFF_MAX_S`). Once
``RESTART_LIMIT`` crashes fall within the window, the instance stays down, and its model
UNAVAILABLE, with the reason.
"""

from __future__ import annotations

import collections
import time

#: The first restart's delay; it doubles with each crash in the window, up to BACKOFF_MAX_S.
BACKOFF_S = 0.25
BACKOFF_MAX_S = 10.0


class RestartPolicy:
    """One instance's crashes within the window (not thread-safe: its caller holds the instance's lock)."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._crashes: collections.deque[float] = collections.deque()

    def crashed(self, cause: str) -> tuple[str, float | None]:
        """Count a crash now: why the instance cannot serve, and how long before it restarts (None: it
        stays down)."""
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and self._crashes[0] < now - self.window_s:
            self._crashes.popleft()
        count = len(self._crashes)
        if count >= self.limit:
            problem = (
                f"is UNAVAILABLE: {cause}; restarts stopped after {count} crashes within "
                f"{self.window_s:g} s (RESTART_LIMIT {self.limit})"
            )
            return problem, None
        delay = min(BACKOFF_S * 2 ** (count - 1), BACKOFF_MAX_S)
        problem = f"is restarting: {cause} (crash {count} of {self.limit} allowed within {self.window_s:g} s)"
        return problem, delay
