"""The canary policy's fast trip (docs/traffic.md, "Fast trip"): the rule, the windows' running
totals it reads, and the split that applies it on each failure."""

from __future__ import annotations

import random
import re

import pytest

from inferd.config import ModelParameters
from inferd.config.parse import parse_config_text
from inferd.engine import traffic
from inferd.engine.canary import BUCKETS, Policy, Window
from inferd.engine.traffic import ROLLED_BACK, TrafficSplit

#: docs/traffic.md's table: stable requests in the window (none failed) -> the failure of a canary
#: failing every request that rolls it back (worked out by hand from q**k <= 1e-6, q = 1/(n+2) + 0.05).
DOCUMENTED = {1: 15, 2: 12, 3: 10, 4: 10, 5: 9, 6: 8, 9: 8, 10: 7, 17: 7, 18: 6, 74: 6, 75: 5, 1000: 5}


def first_trip(policy: Policy, stable_requests: int, stable_failures: int = 0) -> int | None:
    """The first failure (of a canary failing every request) ``policy`` trips on, within 100."""
    for k in range(1, 101):
        if policy.trips(k, k, stable_requests, stable_failures):
            return k
    return None


@pytest.mark.parametrize(("stable", "bound"), DOCUMENTED.items())
def test_always_failing_canary_trips_at_the_documented_failure(stable: int, bound: int) -> None:
    assert first_trip(Policy(), stable) == bound
    verdict = Policy().trips(bound, bound, stable, 0)
    assert verdict.startswith(f"failure rate 100.00% ({bound} of {bound}) > stable 0.00% (0 of {stable}) + 5.00%")


def test_no_trip_without_a_stable_success_or_below_the_minimum_or_when_off() -> None:
    # every request fails on both (bad requests): nothing says the canary is worse
    assert first_trip(Policy(), 50, 50) is None and first_trip(Policy(), 0) is None
    assert first_trip(Policy(trip_failures=12), 1000) == 12
    assert first_trip(Policy(trip_failures=0), 1000) is None
    # a wider margin needs more evidence: q = 1/1002 + 0.5, q**k <= 1e-6 from k = 20
    assert first_trip(Policy(max_failure_increase=0.5), 1000) == 20


def test_the_same_failure_rate_as_stable_never_trips() -> None:
    policy = Policy()
    for rate in (0.01, 0.1, 0.3, 0.5, 0.9):
        for n in (10, 100, 1000, 10_000):
            f = round(rate * n)
            assert not policy.trips(n, f, n, f), (rate, n)
            # ...and neither does one a little worse, within the margin
            assert not policy.trips(n, min(n, f + n // 25), n, f), (rate, n)


def test_a_clearly_worse_rate_trips_once_the_evidence_is_in() -> None:
    policy = Policy()
    # 30 % against 1 %: significant from a few dozen requests, not from 10
    assert not policy.trips(10, 3, 1000, 10)
    assert policy.trips(60, 18, 1000, 10).startswith("failure rate 30.00% (18 of 60) > stable 1.00% (10 of 1000)")


def test_a_run_of_failures_trips_only_while_the_stable_version_answers() -> None:
    policy = Policy()
    # 500 good requests in the window hide 12 failures (2.3 %), but not 12 in a row while stable answered 12
    assert not policy.trips(512, 12, 1000, 0)
    assert policy.trips(512, 12, 1000, 0, 12, 12, 0) == (
        "12 failures in a row while the stable version answered 12 of 12 (fast trip)"
    )
    # the same run while the stable version failed alike (an outage of both), or served nothing meanwhile
    assert not policy.trips(512, 12, 1000, 0, 12, 12, 6)
    assert not policy.trips(512, 12, 1000, 0, 12, 0, 0)
    # a run no longer than a flaky stable version's failures make likely (q = 0.15: 8 in a row at least)
    assert not policy.trips(1000, 107, 1000, 100, 7, 200, 0)


def test_window_running_totals_follow_the_buckets() -> None:
    rng = random.Random(7)
    window = Window(10.0)  # buckets of 1 s
    t = 1000.0
    for _ in range(5000):
        t += rng.choice((0.0, 0.01, 0.3, 1.0, 2.5, 13.0))  # gaps longer than the window too
        window.record(rng.random() < 0.8, 1000, t)
        if rng.random() < 0.1:
            later = t + rng.random() * 3
            window.advance(later)
            figures = window.figures(later)
            assert (window.requests, window.failures) == (figures["requests"], figures["failures"])
            t = later
    window.advance(t + 10.0)
    assert window.requests == window.failures == 0 and window.figures(t + 10.0)["requests"] == 0
    assert window.seen > 0 and len(window.stamps) == BUCKETS


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch):
    """The split's clock, moved by hand (seconds)."""
    now = [1000.0]
    monkeypatch.setattr(traffic, "now", lambda: now[0])
    return now


def run(split: TrafficSplit, clock: list[float], requests: int, fail: dict[int, float], rng: random.Random) -> int:
    """Send ``requests`` through ``split`` (version v fails at rate ``fail[v]``), 10 ms apart; the
    canary's failures before it was rolled back (all of them when it was not)."""
    failed = 0
    for _ in range(requests):
        clock[0] += 0.01
        version = split.pick(str(rng.getrandbits(64)))
        ok = rng.random() >= fail[version]
        failed += version == 2 and not ok
        if split.observe(version, ok, 1_000_000) == "rollback":
            return failed
    return failed


def fast_only() -> Policy:
    return Policy(min_requests=10**9)  # the window rule never has enough requests: only the fast trip judges


def needed(stable_requests: int) -> int:
    """The failure a canary failing every request trips on while the stable version has answered
    ``stable_requests`` (none failed): the first k >= 5 with q**k <= 1e-6, q = 1/(n+2) + 0.05."""
    q = 1 / (stable_requests + 2) + 0.05
    return next(k for k in range(5, 100) if q**k <= 1e-6 * (1 + 1e-9))  # q = 0.1 exactly at n = 18


def test_split_trips_an_always_failing_canary_on_the_failure_the_rule_says(clock: list[float]) -> None:
    assert {n: needed(n) for n in DOCUMENTED} == DOCUMENTED
    for seed in range(50):
        rng = random.Random(seed)
        split = TrafficSplit("m", {1: 50, 2: 50}, fast_only())
        stable_at: list[int] = []  # the stable's requests when the canary failed the k-th time
        while split.states[2] != ROLLED_BACK:
            clock[0] += 0.01
            version = split.pick(str(rng.getrandbits(64)))
            stable_at += [split.windows[1].requests] if version == 2 else []
            split.observe(version, version == 1, 1_000_000)
            assert len(stable_at) < 100
        assert split.weights == {1: 50, 2: 0}
        # the first failure k with k >= needed(stable requests then); by the 10th once stable answered 3
        assert len(stable_at) == next(k for k, n in enumerate(stable_at, 1) if k >= needed(n)), (seed, stable_at)
        assert len(stable_at) <= 10 or stable_at[9] < 3


def test_split_trips_a_canary_that_breaks_after_serving_well(clock: list[float]) -> None:
    rng = random.Random(1)
    split = TrafficSplit("m", {1: 50, 2: 50}, fast_only())
    assert run(split, clock, 2000, {1: 0.0, 2: 0.0}, rng) == 0 and split.decisions == []
    failed = run(split, clock, 2000, {1: 0.0, 2: 1.0}, rng)
    found = re.fullmatch(r"(\d+) failures in a row while the stable version answered (\d+) of (\d+) \(fast trip\)",
                         split.decisions[-1]["verdict"])  # fmt: skip
    assert split.states[2] == ROLLED_BACK and found and int(found[1]) == failed and found[2] == found[3]
    assert failed <= 20  # ~1000 good canary requests in the window: the window's rate alone would need ~60


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.3, 0.5, 0.9])
def test_split_does_not_trip_a_canary_as_flaky_as_stable(clock: list[float], rate: float) -> None:
    rng = random.Random(int(rate * 100))
    for weights in ({1: 50, 2: 50}, {1: 90, 2: 10}):
        split = TrafficSplit("m", weights, fast_only())
        run(split, clock, 20_000, {1: rate, 2: rate}, rng)
        assert split.decisions == [], split.decisions
    # an outage both versions share, after a good spell: they fail alike, the canary stays
    split = TrafficSplit("m", {1: 50, 2: 50}, fast_only())
    run(split, clock, 3000, {1: 0.0, 2: 0.0}, rng)
    run(split, clock, 3000, {1: max(rate, 0.5), 2: max(rate, 0.5)}, rng)
    assert split.decisions == []


def test_trip_failures_parameter() -> None:
    def policy(value: str) -> Policy:
        text = f'name: "m"\nparameters {{ key: "canary_trip_failures" value {{ string_value: "{value}" }} }}\n'
        return Policy.from_config(ModelParameters(parse_config_text(text, "config.pbtxt")))

    assert policy("8").trip_failures == 8 and policy("0").trip_failures == 0 and Policy().trip_failures == 5
    assert "fast trip" in Policy().rule() and "fast trip" not in policy("0").rule()
    with pytest.raises(ValueError, match="canary_trip_failures >= 0"):
        policy("-1")
