"""``ModelStats.record_successes`` (one lock per execution) counts what ``record_success`` per request counts."""

from __future__ import annotations

from inferd.engine.stats import ModelStats


class _Seen:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def observe(self, kind: str, ns: int) -> None:
        self.calls.append((kind, ns))


def _durations(stats: ModelStats) -> dict[str, tuple[int, int]]:
    return {name: (d.count, d.ns) for name, d in stats.durations.items()}


def test_record_successes_equals_one_record_success_per_request() -> None:
    one, many = ModelStats("m", "1"), ModelStats("m", "1")
    one.observer, many.observer = _Seen(), _Seen()
    for total, queue in ((100, 7), (250, 30)):
        one.record_success(total, queue, 3, 40, 5)
    many.record_successes([100, 250], [7, 30], 3, 40, 5)
    assert _durations(many) == _durations(one)
    assert _durations(many)["success"] == (2, 350)
    assert _durations(many)["compute_infer"] == (2, 80)
    assert many.observer.calls == one.observer.calls  # type: ignore[union-attr]
    assert many.observer.calls[:2] == [("request", 100), ("queue", 7)]  # type: ignore[union-attr]


def test_record_successes_of_nothing_changes_nothing() -> None:
    stats = ModelStats("m", "1")
    stats.record_successes([], [], 1, 2, 3)
    assert _durations(stats)["success"] == (0, 0)
    assert stats.last_inference_ms == 0
