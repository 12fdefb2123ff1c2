"""The routing view (``--routing-metrics``) over vLLM-shaped families, written as the metrics port
writes them and read with the endpoint picker's and production-stack's rules (tests/router_rules.py):
what a two-engine pod with a second worker gives, without starting vLLM (the live tests of
tests/plugins/backend_vllm/test_routing_metrics.py start one pod; ``--workers`` with vLLM here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from inferd.frontends.metrics.exposition import classic_text
from inferd.frontends.metrics.routing import RoutingView
from tests.router_rules import Lora, families, picker_lora, picker_value, production_stack


class _Pod:
    """Two engines, ``a`` and ``b``, as the vLLM backend's source gives them."""

    def collect(self) -> Iterator[Metric]:
        for name, (a, b) in {
            "vllm:num_requests_waiting": (2, 1),
            "vllm:num_requests_running": (4, 3),
            "vllm:kv_cache_usage_perc": (0.25, 0.5),
        }.items():
            family = GaugeMetricFamily(name, "x", labels=["engine", "model_name"])
            family.add_metric(["0", "a"], a)
            family.add_metric(["0", "b"], b)
            yield family
        lora = GaugeMetricFamily("vllm:lora_requests_info", "x",
                                 labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters", "model_name"])  # fmt: skip
        lora.add_metric(["1", "", "sql", "a"], 10.0)  # a's older series: sql ran then
        lora.add_metric(["1", "", "", "a"], 20.0)  # a's latest: idle
        lora.add_metric(["2", "chat", "code", "b"], 15.0)  # b's latest
        yield lora
        for name, (a, b) in {"vllm:prefix_cache_queries": (100, 60), "vllm:prefix_cache_hits": (30, 10)}.items():
            counter = CounterMetricFamily(name, "x", labels=["engine", "model_name"])
            counter.add_metric(["0", "a"], a)
            counter.add_metric(["0", "b"], b)
            yield counter


def _gauge(name: str, model: str, value: float) -> list[Any]:
    return [name, "gauge", "x", [[name, {"engine": "0", "model_name": model}, value]]]


#: A second worker serving engine ``a`` too (what it answered for this scrape).
PEER = {
    "gauges": [
        _gauge("vllm:num_requests_waiting", "a", 3),
        _gauge("vllm:kv_cache_usage_perc", "a", 0.75),
        _gauge("vllm:cache_config_info", "a", 1),  # not a routed gauge: left as the answering worker's
    ]
}


def _text(live: list[dict[str, Any]]) -> str:
    return classic_text(RoutingView(_Pod(), lambda: live)).decode()


def test_pod_figures_come_first_and_per_model_series_follow() -> None:
    text = _text([])
    assert picker_value(text, "vllm:num_requests_waiting") == 3
    assert picker_value(text, "vllm:num_requests_running") == 7
    assert picker_value(text, "vllm:kv_cache_usage_perc") == 0.5
    assert picker_value(text, "vllm:num_requests_running{model_name=a}") == 4
    assert [s.labels.get("model_name") for s in families(text)["vllm:num_requests_waiting"]] == [None, "a", "b"]
    assert production_stack(text) == {"running": 3, "waiting": 1, "kv_cache": 0.5, "prefix_hit_rate": 40 / 160}


def test_a_second_workers_live_gauges_add_up_per_series() -> None:
    text = _text([PEER])
    assert picker_value(text, "vllm:num_requests_waiting") == 6
    assert picker_value(text, "vllm:num_requests_waiting{model_name=a}") == 5  # 2 here + 3 there
    assert picker_value(text, "vllm:kv_cache_usage_perc") == 0.75  # the largest, not a sum
    assert picker_value(text, "vllm:kv_cache_usage_perc{model_name=a}") == 0.75
    assert "vllm:cache_config_info" not in families(text)
    assert production_stack(text)["kv_cache"] == 0.75


def test_lora_info_is_every_engines_latest_and_read_first() -> None:
    text = _text([])
    series = families(text)["vllm:lora_requests_info"]
    assert series[0].labels == {"running_lora_adapters": "code", "waiting_lora_adapters": "chat", "max_lora": "3"}
    assert series[0].value == 20.0
    assert [s.value for s in series[1:]] == [20.0, 15.0]  # a's older series is left out
    assert picker_lora(text) == Lora({"code"}, {"chat"}, 3)


def test_an_llm_pod_without_lora_still_has_the_family() -> None:
    class NoLora(_Pod):
        def collect(self) -> Iterator[Metric]:
            return (f for f in super().collect() if f.name != "vllm:lora_requests_info")

    text = classic_text(RoutingView(NoLora(), list)).decode()
    (only,) = families(text)["vllm:lora_requests_info"]
    assert only.labels == {"running_lora_adapters": "", "waiting_lora_adapters": "", "max_lora": "0"}
    assert picker_lora(text) is None
