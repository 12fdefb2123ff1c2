"""The Grafana dashboard and the Prometheus alerting rules read only metrics a running
`inferd serve` exposes: a renamed metric fails here instead of leaving an empty panel."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from inferd.frontends.metrics.collectors import _GPU
from inferd.testing import ServerProcess
from tests.deploy.conftest import DEPLOY, http_get
from tests.deploy.promql import metric_names

#: Metrics the rules read that Prometheus and kube-state-metrics expose, not inferd (Triton has no
#: per-model readiness metric; readiness is the Deployment's available replicas).
NOT_INFERDS = {"up", "kube_deployment_status_replicas_available", "kube_deployment_spec_replicas"}
#: Exposed only where NVML sees a GPU: the names the GPU collector emits stand in on a CPU machine.
GPU_ONLY = {name for name, _, _ in _GPU} | {"nv_energy_consumption"}


@pytest.fixture(scope="module")
def exposed(served: ServerProcess) -> set[str]:
    """Every sample name on /metrics after the fixture's traffic, as Prometheus stores them
    (histogram _bucket/_sum/_count too)."""
    status, body = http_get(f"http://127.0.0.1:{served.metrics_port}/metrics")
    assert status == 200
    names = set(re.findall(r"^([a-zA-Z_:][\w:]*)[{ ]", body.decode(), re.M))
    if not any(n.startswith("nv_gpu_") for n in names):
        names |= GPU_ONLY
    return names


def _dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads((DEPLOY / "grafana/inferd.json").read_text())
    exprs = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:  # Grafana's label_values(<series selector>, <label>)
        if var["type"] == "query":
            (selector,) = re.fullmatch(r"label_values\((.*), *\w+\)", var["query"]["query"]).groups()
            exprs.append((var["name"], selector))
    return exprs


def _rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load((DEPLOY / "prometheus/rules.yaml").read_text())["groups"]
    return [(r["alert"], r["expr"]) for g in groups for r in g["rules"]]


def test_the_dashboard_reads_only_exposed_metrics(exposed):
    exprs = _dashboard_exprs()
    assert len(exprs) >= 20
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= exposed, (title, sorted(names - exposed))


def test_the_dashboard_covers_what_operators_watch():
    used = set().union(*(metric_names(e) for _, e in _dashboard_exprs()))
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_request_duration_us",
                 "nv_inference_queue_duration_us", "nv_inference_exec_count", "nv_inference_count",
                 "nv_cache_num_hits_per_model", "nv_cpu_utilization", "nv_gpu_utilization",
                 "nv_inference_first_response_histogram_ms_bucket", "inferd_llm_generation_tokens",
                 "inferd_llm_time_to_first_token_seconds_bucket", "inferd_traffic_weight",
                 "inferd_canary_rollbacks_total", "inferd_canary_promotions_total"):  # fmt: skip
        assert name in used, name
    failures = [e for _, e in _dashboard_exprs() if "nv_inference_request_failure" in e]
    assert any("by (model, reason)" in e for e in failures)
    assert any("by (model, version)" in e for e in failures)  # the canary row: stable vs canary


def test_the_alerting_rules_read_only_exposed_metrics(exposed):
    rules = _rule_exprs()
    assert {a for a, _ in rules} >= {"InferdHighErrorRate", "InferdHighQueueTime", "InferdNotReady",
                                     "InferdCanaryRolledBack"}  # fmt: skip
    for alert, expr in rules:
        names = metric_names(expr)
        assert names, (alert, expr)
        assert names <= exposed | NOT_INFERDS, (alert, sorted(names - exposed - NOT_INFERDS))


def test_a_renamed_metric_is_caught(exposed):
    assert not metric_names("rate(nv_inference_request_successes[5m])") <= exposed
