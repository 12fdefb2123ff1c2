"""The canary policy: a sliding window of outcomes per version, and the rule that judges a canary.

Each version in a traffic split keeps a :class:`Window`: ``BUCKETS`` time buckets, each with a
request count, a failure count and a latency histogram (quarter-octave bins), so recording one
request is a few integer operations and judging reads at most ``BUCKETS`` x ``BINS`` counters.
Judging runs once per bucket; the fast trip (:meth:`Policy.trips`) runs on each canary failure,
from running totals, so a canary failing far more often than the stable version is rolled back
within a few failures (docs/traffic.md, "The fast trip").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from inferd.config.parameters import ModelParameters

#: Time buckets per window (the window slides by one bucket at a time).
BUCKETS = 10
#: Latency histogram bins: four per power of two of microseconds (about 19 % wide), up to ~2^40 us.
BINS = 160
#: The fast trip rolls a canary back when its failures would happen by chance less often than this,
#: were its failure rate the stable one's plus the margin.
TRIP_ODDS = 1e-6
_EVIDENCE = -math.log(TRIP_ODDS)


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
    """Outcomes of one version over the last ``seconds``: O(1) to record.

    Besides the buckets it keeps running totals over the buckets in the window (``requests``,
    ``failures``, kept up as buckets leave it), totals since it began (``seen``, ``seen_failed``,
    never decreasing) and the current run of consecutive failures (``streak``, with the stable
    version's ``seen``/``seen_failed`` when the run began in ``mark_seen``/``mark_failed``): what the
    fast trip reads on each canary failure, without walking the buckets.
    """

    __slots__ = (
        "bucket_s",
        "stamps",
        "counts",
        "fails",
        "hist",
        "tick",
        "requests",
        "failures",
        "seen",
        "seen_failed",
        "streak",
        "mark_seen",
        "mark_failed",
    )

    def __init__(self, seconds: float) -> None:
        self.bucket_s = seconds / BUCKETS
        self.seen = self.seen_failed = 0
        self.clear()

    def clear(self) -> None:
        """Forget the window's outcomes (``seen`` and ``seen_failed`` keep counting)."""
        self.stamps = [-1] * BUCKETS
        self.counts = [0] * BUCKETS
        self.fails = [0] * BUCKETS
        self.hist = [[0] * BINS for _ in range(BUCKETS)]
        self.tick = -1
        self.requests = self.failures = 0
        self.streak = self.mark_seen = self.mark_failed = 0

    def advance(self, now: float) -> None:
        """Move the window to ``now``: buckets older than it leave the running totals."""
        tick = int(now / self.bucket_s)
        if tick > self.tick:
            self._move(tick)

    def _move(self, tick: int) -> None:
        for t in range(max(self.tick + 1, tick - BUCKETS + 1), tick + 1):
            i = t % BUCKETS
            if self.counts[i]:
                self.requests -= self.counts[i]
                self.failures -= self.fails[i]
                self.counts[i] = self.fails[i] = 0
                self.hist[i] = [0] * BINS
            self.stamps[i] = t
        self.tick = tick

    def record(self, ok: bool, ns: int, now: float) -> None:
        tick = int(now / self.bucket_s)
        if tick > self.tick:
            self._move(tick)
        i = self.tick % BUCKETS
        self.counts[i] += 1
        self.requests += 1
        self.seen += 1
        if ok:
            self.streak = 0
        else:
            self.fails[i] += 1
            self.failures += 1
            self.seen_failed += 1
            self.streak += 1
        self.hist[i][_bin(ns)] += 1

    def figures(self, now: float) -> dict[str, float]:
        """Requests, failures, failure rate and p95 (ms) over the buckets still in the window."""
        tick = int(now / self.bucket_s)
        live = [i for i in range(BUCKETS) if tick - BUCKETS < self.stamps[i] <= tick]
        count = sum(self.counts[i] for i in live)
        failures = sum(self.fails[i] for i in live)
        p95 = 0.0
        if count:
            rank, seen = 0.95 * count, 0
            for b in range(BINS):
                seen += sum(self.hist[i][b] for i in live)
                if seen >= rank:
                    p95 = _bin_upper_ms(b)
                    break
        return {
            "requests": count,
            "failures": failures,
            "failure_rate": failures / count if count else 0.0,
            "p95_ms": round(p95, 3),
        }


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
    #: The fewest canary failures the fast trip rolls back on (0: no fast trip, only the window rule).
    trip_failures: int = 5

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
            trip_failures=int(params.integer("canary_trip_failures", d.trip_failures)),
        )
        if (
            policy.window_s <= 0
            or policy.min_requests < 1
            or policy.trip_failures < 0
            or any(not 0 < s <= 100 for s in policy.promote_steps)
        ):
            raise ValueError(
                "canary_window_s must be > 0, canary_min_requests >= 1, canary_trip_failures >= 0, "
                "promotion steps in 1..100"
            )
        return policy

    def rule(self) -> str:
        return (
            f"roll back when, over the last {self.window_s:g} s with at least {self.min_requests} requests on each "
            f"version, the canary's failure rate exceeds the stable one's by more than "
            f"{self.max_failure_increase * 100:g} points, or its p95 latency exceeds the stable p95 by more than "
            f"{self.max_p95_increase * 100:g} % and {self.p95_slack_ms:g} ms"
            + (
                f"; and at once (fast trip), on a canary failure, once it has failed {self.trip_failures} times, "
                f"when its failures in the window, or in a row while the stable version answered, are less "
                f"likely than 1 in {1 / TRIP_ODDS:,.0f} at the stable failure rate + "
                f"{self.max_failure_increase * 100:g} points"
                if self.trip_failures
                else ""
            )
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

    def trips(
        self,
        requests: int,
        failures: int,
        stable_requests: int,
        stable_failures: int,
        streak: int = 0,
        meanwhile: int = 0,
        meanwhile_failed: int = 0,
    ) -> str:
        """Why a canary's failures are clearly worse than the stable version's ("" while they are not):
        the fast trip, asked on each canary failure. O(1): a few float operations, none at all
        while the canary has failed fewer than ``trip_failures`` times or no more often than the stable.

        ``requests``/``failures`` are the canary's in the window, ``stable_*`` the stable version's;
        ``streak`` the canary's failures in a row, over which the stable version served ``meanwhile``
        requests of which ``meanwhile_failed`` failed. Taking the stable rate plus the margin as the
        canary's, ``q``, with one failure and one success added to the stable's counts (a stable
        version with few requests is not taken for a flawless one), the canary trips when

        - its window's failures are less likely than ``TRIP_ODDS`` (the Chernoff bound on the
          binomial tail: ``requests * KL(failures / requests || q) >= ln(1 / TRIP_ODDS)``), or
        - its last ``streak`` failures in a row are (``q ** streak <= TRIP_ODDS``) *and* the stable
          version's answers over the same run show it is not failing alike (the likelihood ratio of
          "the canary fails every request, the stable at its own rate" over "both at one rate" is at
          least ``1 / TRIP_ODDS``): a canary that breaks after serving well for a while, which the
          window's earlier successes would hide, while an outage both versions share does not trip.
        """
        if not self.trip_failures or failures < self.trip_failures or stable_requests <= stable_failures:
            return ""
        m = self.max_failure_increase
        q = (stable_failures + 1) / (stable_requests + 2) + m
        rate = failures / requests
        if q >= 1:
            return ""
        if rate > q and requests * _kl(rate, q) >= _EVIDENCE:
            return (
                f"failure rate {rate:.2%} ({failures} of {requests}) > stable "
                f"{stable_failures / stable_requests:.2%} ({stable_failures} of {stable_requests}) + {m:.2%}, "
                f"beyond chance (fast trip)"
            )
        if (
            streak >= self.trip_failures
            and -streak * math.log(q) >= _EVIDENCE
            and meanwhile > meanwhile_failed
            and _streak_evidence(streak, meanwhile, meanwhile_failed) >= _EVIDENCE
        ):
            return (
                f"{streak} failures in a row while the stable version answered {meanwhile - meanwhile_failed} "
                f"of {meanwhile} (fast trip)"
            )
        return ""


def _kl(r: float, q: float) -> float:
    """The Kullback-Leibler divergence of Bernoulli(r) from Bernoulli(q), 0 < q < 1."""
    return (r * math.log(r / q) if r else 0.0) + ((1 - r) * math.log((1 - r) / (1 - q)) if r < 1 else 0.0)


def _streak_evidence(streak: int, n: int, f: int) -> float:
    """ln of the likelihood ratio of "the canary failed ``streak`` of ``streak`` requests, the stable
    ``f`` of ``n``, each at its own rate" over "both at one rate" (the two-sample binomial test)."""
    total = streak + n
    return (
        (streak + f) * math.log(total / (streak + f))
        + (n - f) * math.log(total / n)
        + (f * math.log(f / n) if f else 0.0)
    )


#: The clock windows use (seconds).
now = time.monotonic
