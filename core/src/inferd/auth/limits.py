"""Per-tenant limits: requests per second (a token bucket with a burst) and requests in flight,
plus the per-tenant request counters ``/metrics`` shows. Everything runs on the event loop: no
locks, O(1) per request."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from inferd.auth.keys import Tenant

#: ``inferd_tenant_requests_total`` outcomes.
OUTCOMES = ("admitted", "unauthenticated", "forbidden", "rate_limited", "concurrency_limited", "token_limited")


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; :meth:`take` spends one or says how long to wait."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = max(burst, 1.0)
        self.tokens = self.burst
        self.stamp = time.monotonic()

    def take(self) -> float:
        """0.0 when a token was spent, else the seconds until one is there."""
        wait = self.wait()
        if wait == 0.0:
            self.tokens -= 1.0
        return wait

    def wait(self) -> float:
        """0.0 while there is a token left (none is spent), else the seconds until there is one."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def spend(self, count: float) -> None:
        """Spend ``count`` tokens at once (the balance may go below 0: a debt paid back over time)."""
        self.wait()
        self.tokens -= count


@dataclass
class TenantState:
    """One tenant's bucket (None: no rate limit), requests in flight, and its token budget
    (``tokens_per_minute``: refilled at a sixtieth a second, up to a minute's worth)."""

    bucket: TokenBucket | None
    limits: tuple[float | None, float | None, int | None] = (None, None, None)
    in_flight: int = 0
    budget: TokenBucket | None = None


@dataclass
class Limited:
    """A request refused by a limit: why, and the ``Retry-After`` seconds."""

    outcome: str
    message: str
    retry_after: int


@dataclass
class TenantLimits:
    """The state of every tenant's limits, and the request counters by (tenant, outcome)."""

    states: dict[str, TenantState] = field(default_factory=dict)
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def _state(self, tenant: Tenant) -> TenantState:
        state = self.states.get(tenant.name)
        limits = (tenant.rate, tenant.burst, tenant.tokens_per_minute)
        if state is None or state.limits != limits:  # new tenant, or its limits changed on a reload
            bucket = None if tenant.rate is None else TokenBucket(tenant.rate, tenant.burst or tenant.rate)
            in_flight = 0 if state is None else state.in_flight
            per_minute = tenant.tokens_per_minute
            budget = None if per_minute is None else TokenBucket(per_minute / 60.0, per_minute)
            state = self.states[tenant.name] = TenantState(bucket, limits, in_flight, budget)
        return state

    def acquire(self, tenant: Tenant) -> Limited | None:
        """Take a slot and a token for one request of ``tenant``; a :class:`Limited` when over."""
        state = self._state(tenant)
        if tenant.concurrency is not None and state.in_flight >= tenant.concurrency:
            self.counts[tenant.name, "concurrency_limited"] += 1
            return Limited(
                "concurrency_limited",
                f"tenant '{tenant.name}' already has {state.in_flight} requests in flight "
                f"(its limit is {tenant.concurrency}); retry when one is answered",
                1,
            )
        if state.budget is not None:
            wait = state.budget.wait()
            if wait > 0.0:
                self.counts[tenant.name, "token_limited"] += 1
                return Limited(
                    "token_limited",
                    f"tenant '{tenant.name}' used its {tenant.tokens_per_minute} tokens per minute; "
                    f"retry in {wait:.3f} s",
                    math.ceil(wait),
                )
        if state.bucket is not None:
            wait = state.bucket.take()
            if wait > 0.0:
                self.counts[tenant.name, "rate_limited"] += 1
                return Limited(
                    "rate_limited",
                    f"tenant '{tenant.name}' is over its rate limit of {tenant.rate:g} requests/s "
                    f"(burst {state.bucket.burst:g}); retry in {wait:.3f} s",
                    math.ceil(wait),
                )
        state.in_flight += 1
        self.counts[tenant.name, "admitted"] += 1
        return None

    def release(self, tenant: Tenant) -> None:
        """The request :meth:`acquire` admitted is answered."""
        state = self.states.get(tenant.name)
        if state is not None and state.in_flight > 0:
            state.in_flight -= 1

    def spend(self, tenant: Tenant, tokens: int) -> None:
        """``tenant`` used ``tokens`` (from its ``tokens_per_minute`` budget, when it has one)."""
        budget = self._state(tenant).budget
        if budget is not None:
            budget.spend(tokens)

    def count(self, tenant: str, outcome: str) -> None:
        self.counts[tenant, outcome] += 1
