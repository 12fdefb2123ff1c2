"""``SummedSources`` (``--workers N``): the answering worker's counters plus the other workers',
including series and families only another worker has (a tenant that only reached that worker)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from inferd.engine.metric_sources import MetricSources, SummedSources


class _Tokens:
    def collect(self) -> Iterator[Metric]:
        family = Metric("inferd_tenant_tokens_total", "Tokens", "counter")
        family.add_sample("inferd_tenant_tokens_total", {"tenant": "alice", "kind": "prompt"}, 3)
        yield family


def _samples(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_series_and_families_only_other_workers_have_are_summed_in() -> None:
    local = MetricSources()
    local.add(_Tokens())
    peer = [
        ["inferd_tenant_tokens_total", "counter", "Tokens", [
            ["inferd_tenant_tokens_total", {"tenant": "alice", "kind": "prompt"}, 4],
            ["inferd_tenant_tokens_total", {"tenant": "bob", "kind": "prompt"}, 5],
        ]],
        ["inferd_tenant_model_requests_total", "counter", "Requests", [
            ["inferd_tenant_model_requests_total", {"tenant": "bob", "outcome": "success"}, 2],
        ]],
        ["some_gauge", "gauge", "A gauge", [["some_gauge", {}, 9]]],
    ]  # fmt: skip
    families = list(SummedSources(local, lambda: [peer, peer]).collect())
    assert [f.name for f in families] == ["inferd_tenant_tokens_total", "inferd_tenant_model_requests_total"]
    assert _samples(families) == {
        ("inferd_tenant_tokens_total", (("kind", "prompt"), ("tenant", "alice"))): 3 + 4 + 4,
        ("inferd_tenant_tokens_total", (("kind", "prompt"), ("tenant", "bob"))): 10,
        ("inferd_tenant_model_requests_total", (("outcome", "success"), ("tenant", "bob"))): 4,
    }
