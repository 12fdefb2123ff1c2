"""The canary policy: a sliding window of outcomes per version, and the rule that judges a canary.

Each version in a traffic split keeps a :class:`Window`: ``BUCKETS`` time buckets, each with a
request count, a failure count and a latency histogram (quarter-octave bins), so recording one
request is a few integer operations and judging reads at most ``BUCKETS`` x ``BINS`` counters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from inferd.config.parameters import ModelParameters

#: Time buckets per window (the window slides by one bucket at a time).
BUCKETS = 10
#: Latency histogram bins: four per power of two of microseconds (about 19 % wide), up to ~2^40 us.
BINS = 160


def _bin(ns: int) -> int:
    """The histogram bin of a latency in nanoseconds (quarter-octaves of microseconds)."""
    us = ns >> 10
    bits = us.bit_length()
    if bits < 3:
        return us
    index = bits * 4 + ((us >> (bits - 3)) & 3)
    return index if index < BINS else BINS - 1


def _bin_upper_ms(index: int) -> float:
    """The upper edge of bin ``index`` in milliseconds (what a p95 from the histogram reports)."""
    if index < 3:
        return (index + 1) * 1.024 / 1000
    bits, quarter = divmod(index, 4)
    return ((4 + quarter + 1) << (bits - 3)) * 1.024 / 1000


class Window:
    """Outcomes of one version over the last ``seconds``: O(1) to record."""

    __slots__ = ("bucket_s", "stamps", "counts", "failures", "hist")

    def __init__(self, seconds: float) -> None:
        self.bucket_s = seconds / BUCKETS
        self.stamps = [-1] * BUCKETS
        self.counts = [0] * BUCKETS
        self.failures = [0] * BUCKETS
        self.hist = [[0] * BINS for _ in range(BUCKETS)]

    def record(self, ok: bool, ns: int, now: float) -> None:
        tick = int(now / self.bucket_s)
        i = tick % BUCKETS
        if self.stamps[i] != tick:  # a bucket older than the window: start it again
            self.stamps[i] = tick
            self.counts[i] = self.failures[i] = 0
            self.hist[i] = [0] * BINS
        self.counts[i] += 1
        if not ok:
            self.failures[i] += 1
        self.hist[i][_bin(ns)] += 1

    def clear(self) -> None:
        self.stamps = [-1] * BUCKETS

    def figures(self, now: float) -> dict[str, float]:
        """Requests, failures, failure rate and p95 (ms) over the buckets still in the window."""
        tick = int(now / self.bucket_s)
        live = [i for i in range(BUCKETS) if tick - BUCKETS < self.stamps[i] <= tick]
        count = sum(self.counts[i] for i in live)
        failures = sum(self.failures[i] for i in live)
        p95 = 0.0
        if count:
            rank, seen = 0.95 * count, 0
            for b in range(BINS):
                seen += sum(self.hist[i][b] for i in live)
                if seen >= rank:
                    p95 = _bin_upper_ms(b)
                    break
        return {"requests": count, "failures": failures, "failure_rate": failures / count if count else 0.0,
                "p95_ms": round(p95, 3)}  # fmt: skip


@dataclass(frozen=True)
class Policy:
    """How a canary is judged: the model's ``canary_*`` config parameters, or these defaults."""

    rollback: bool = True
    window_s: float = 60.0
    min_requests: int = 100
    #: The canary's failure rate may exceed the stable version's by at most this (a fraction: 0.05 = 5 points).
    max_failure_increase: float = 0.05
    #: Its p95 may exceed the stable p95 by at most this fraction (0.5: 50 % slower)...
    max_p95_increase: float = 0.5
    #: ...or, whichever is larger, by this many milliseconds (noise on fast models).
    p95_slack_ms: float = 10.0
    #: The weights (percent) an automatic promotion steps through while the canary holds; () for none.
    promote_steps: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, params: ModelParameters) -> Policy:
        steps = params.get("canary_promote_steps", "").replace(" ", "")
        d = cls()
        policy = cls(
            rollback=bool(params.flag("canary_rollback", d.rollback)),
            window_s=float(params.number("canary_window_s", d.window_s)),
            min_requests=int(params.integer("canary_min_requests", d.min_requests)),
            max_failure_increase=float(params.number("canary_max_failure_increase", d.max_failure_increase)),
            max_p95_increase=float(params.number("canary_max_p95_increase", d.max_p95_increase)),
            p95_slack_ms=float(params.number("canary_p95_slack_ms", d.p95_slack_ms)),
            promote_steps=tuple(int(s) for s in steps.split(",")) if steps else (),
        )
        if policy.window_s <= 0 or policy.min_requests < 1 or any(not 0 < s <= 100 for s in policy.promote_steps):
            raise ValueError("canary_window_s must be > 0, canary_min_requests >= 1, promotion steps in 1..100")
        return policy

    def rule(self) -> str:
        return (
            f"roll back when, over the last {self.window_s:g} s with at least {self.min_requests} requests on each "
            f"version, the canary's failure rate exceeds the stable one's by more than "
            f"{self.max_failure_increase * 100:g} points, or its p95 latency exceeds the stable p95 by more than "
            f"{self.max_p95_increase * 100:g} % and {self.p95_slack_ms:g} ms"
        )

    def verdict(self, canary: dict[str, float], stable: dict[str, float]) -> str | None:
        """Why the canary is worse ("" when it holds), or None while either has too few requests."""
        if canary["requests"] < self.min_requests or stable["requests"] < self.min_requests:
            return None
        worse = []
        if canary["failure_rate"] > stable["failure_rate"] + self.max_failure_increase:
            worse.append(
                f"failure rate {canary['failure_rate']:.2%} > stable {stable['failure_rate']:.2%} "
                f"+ {self.max_failure_increase:.2%}"
            )
        limit = max(stable["p95_ms"] * (1 + self.max_p95_increase), stable["p95_ms"] + self.p95_slack_ms)
        if canary["p95_ms"] > limit:
            worse.append(f"p95 {canary['p95_ms']:g} ms > limit {limit:g} ms (stable p95 {stable['p95_ms']:g} ms)")
        return "; ".join(worse)


#: The clock windows use (seconds).
now = time.monotonic
