"""Statistics summed over workers equal what one process counting all the traffic reports."""

from __future__ import annotations

import json

from inferd.engine.stats import ModelStats
from inferd.frontends.metrics.aggregate import add_snapshot
from inferd.workers import merge

# (batch size, input ns, infer ns, output ns), then a request's success or failure
TRAFFIC_A = [(1, 10, 20, 30), (4, 11, 21, 31), (1, 12, 22, 32)]
TRAFFIC_B = [(4, 13, 23, 33), (2, 14, 24, 34)]


def record(stats: ModelStats, traffic: list[tuple[int, int, int, int]], failures: int) -> None:
    for size, i, c, o in traffic:
        stats.record_execution(size, i, c, o)
        stats.record_success(i + c + o + 5, 5, i, c, o)
    for _ in range(failures):
        stats.record_failure(7, "REJECTED")


def test_statistics_and_snapshots_sum_like_one_process():
    a, b, everything = ModelStats("m", "1"), ModelStats("m", "1"), ModelStats("m", "1")
    record(a, TRAFFIC_A, 1)
    record(b, TRAFFIC_B, 2)
    record(everything, TRAFFIC_A + TRAFFIC_B, 3)
    wire = json.loads(json.dumps([b.as_dict()]))  # as the control channel carries it

    (summed,) = merge.statistics([a.as_dict()], [wire])
    expected = everything.as_dict()
    summed.pop("last_inference"), expected.pop("last_inference")
    assert summed == expected

    peers = merge.snapshots([json.loads(json.dumps([["m", "1", b.snapshot(), ""]]))])
    assert add_snapshot(a.snapshot(), peers[("m", "1", "")]) == everything.snapshot()


def test_a_version_only_a_peer_serves_is_left_out():
    a, b = ModelStats("m", "1"), ModelStats("m", "2")
    record(b, TRAFFIC_B, 0)
    assert merge.statistics([a.as_dict()], [[b.as_dict()]]) == [a.as_dict()]


def test_one_name_in_two_repositories_is_summed_per_repository():
    # --model-namespacing: 'm' of two repositories, listed by repository on every worker; before,
    # both peers' entries went into the second one and the first kept only this worker's counts.
    mine = [ModelStats("m", "1"), ModelStats("m", "1")]
    peer = [ModelStats("m", "1"), ModelStats("m", "1")]
    record(mine[0], TRAFFIC_A, 0)
    record(peer[0], TRAFFIC_B, 0)
    record(peer[1], TRAFFIC_A, 1)
    first, second = merge.statistics([s.as_dict() for s in mine], [[s.as_dict() for s in peer]])
    assert first["inference_stats"]["success"]["count"] == len(TRAFFIC_A) + len(TRAFFIC_B)
    assert second["inference_stats"]["success"]["count"] == len(TRAFFIC_A)
    assert second["inference_stats"]["fail"]["count"] == 1
    rows = merge.snapshots([[["m", "1", s.snapshot(), ns] for s, ns in zip(peer, ("/r/a", "/r/b"), strict=True)]])
    assert list(rows) == [("m", "1", "/r/a"), ("m", "1", "/r/b")]


def test_metric_snapshots_are_summed_by_namespace_whatever_each_worker_serves():
    # A peer serving only b's 'm' (a's not loaded there yet): its counts are b's, not the first 'm''s.
    b_only = ModelStats("m", "1")
    record(b_only, TRAFFIC_B, 0)
    rows = merge.snapshots([[["m", "1", b_only.snapshot(), "/r/b"]], [["m", "1", b_only.snapshot(), "/r/b"]]])
    assert list(rows) == [("m", "1", "/r/b")]
    assert rows[("m", "1", "/r/b")]["durations"]["success"][0] == 2 * len(TRAFFIC_B)
    summed = merge.add_snapshot_rows([["m", "1", b_only.snapshot(), "/r/a"]], [["m", "1", b_only.snapshot(), "/r/b"]])
    assert [(row[0], row[3]) for row in summed] == [("m", "/r/a"), ("m", "/r/b")]
