"""The metrics frontend: Triton's Prometheus families, equal to the statistics extension's counts.

Checked against Triton 2.51 for the same requests: a backend error counts one
``nv_inference_request_failure{reason="BACKEND"}`` and one execution but no inference; every model
shows all four failure reasons; durations are the statistics' nanoseconds / 1000.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import gevent
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from inferd.engine.stats import ModelStats
from inferd.frontends.metrics.collectors import ModelCollector
from inferd.frontends.metrics.exposition import classic_text
from inferd.frontends.metrics.frontend import latency_config
from inferd.frontends.metrics.latency import LatencyConfig, LatencyWindows, parse_quantiles
from inferd.frontends.metrics.system import CpuMetrics, GpuMetrics
from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

DOUBLE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
# Doubles X; fails the request when X holds a negative value; sleeps X[0] ms when X[1] == 7.
DOUBLE_PY = source("metrics_double")

N_OK, N_FAIL = 5, 3


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        return r.read().decode()


def scrape_as(port: int, accept: str) -> tuple[str, str]:
    """(content type, body) of a scrape sent with this ``Accept`` header."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def text_of(versions: list, config: LatencyConfig) -> str:
    """The classic text of a registry holding only a model collector over ``versions``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ModelCollector(lambda: versions, config))
    return classic_text(registry).decode()


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text -> {(name, labels): value}; checks every family has HELP and TYPE."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, rest = series.partition("{")
        labels = frozenset(tuple(kv.split("=", 1)) for kv in rest.rstrip("}").split(",") if kv) if rest else frozenset()
        labels = frozenset((k, v.strip('"')) for k, v in labels)
        assert any(name == t or name.startswith(t + "_") for t in typed), f"{name} has no TYPE line"
        out[(name, labels)] = float(value)
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, frozenset(labels.items()))]


def x_input(values: list[float]) -> httpclient.InferInput:
    data = np.array([values], dtype=np.float32)
    inp = httpclient.InferInput("X", list(data.shape), "FP32")
    inp.set_data_from_numpy(data)
    return inp


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {"double": {"config.pbtxt": DOUBLE_CONFIG, "1/model.py": DOUBLE_PY}}
    return serve(
        repo,
        "--metrics-interval-ms=200",
        "--metrics-config",
        "summary_latencies=true",
        "--metrics-config",
        "histogram_latencies=true",
    )


@pytest.fixture(scope="module")
def traffic(server):
    """N successes and M backend failures, sent once for the module."""
    client = httpclient.InferenceServerClient(server.http_url)
    for i in range(N_OK):
        client.infer("double", [x_input([i, 1])])
    for _ in range(N_FAIL):
        with pytest.raises(InferenceServerException):
            client.infer("double", [x_input([-1, 1])])
    stats = client.get_inference_statistics("double")["model_stats"][0]
    client.close()
    return stats


def test_counters_equal_requests_and_statistics(server, traffic):
    m = parse(scrape(server.metrics_port))
    labels = {"model": "double", "version": "1"}
    assert value(m, "nv_inference_request_success", **labels) == N_OK
    assert value(m, "nv_inference_request_failure", reason="BACKEND", **labels) == N_FAIL
    for reason in ("REJECTED", "CANCELED", "OTHER"):
        assert value(m, "nv_inference_request_failure", reason=reason, **labels) == 0
    s = traffic["inference_stats"]
    assert s["success"]["count"] == N_OK and s["fail"]["count"] == N_FAIL
    assert value(m, "nv_inference_count", **labels) == traffic["inference_count"] == N_OK
    assert value(m, "nv_inference_exec_count", **labels) == traffic["execution_count"] == N_OK + N_FAIL
    for name, key in (("request", "success"), ("queue", "queue"), ("compute_input", "compute_input"),
                      ("compute_infer", "compute_infer"), ("compute_output", "compute_output")):  # fmt: skip
        assert value(m, f"nv_inference_{name}_duration_us", **labels) == s[key]["ns"] // 1000
    assert value(m, "nv_inference_pending_request_count", **labels) == 0


def test_summaries_and_histogram_agree_with_counters(server, traffic):
    m = parse(scrape(server.metrics_port))
    labels = {"model": "double", "version": "1"}
    assert value(m, "nv_inference_request_summary_us_count", **labels) == N_OK
    assert value(m, "nv_inference_queue_summary_us_sum", **labels) == value(
        m, "nv_inference_queue_duration_us", **labels
    )
    for q in ("0.5", "0.9", "0.95", "0.99", "0.999"):
        assert value(m, "nv_inference_compute_infer_summary_us", quantile=q, **labels) >= 0
    assert value(m, "nv_inference_first_response_histogram_ms_count", **labels) == N_OK
    assert value(m, "nv_inference_first_response_histogram_ms_bucket", le="+Inf", **labels) == N_OK
    assert value(m, "nv_inference_first_response_histogram_ms_bucket", le="100", **labels) <= N_OK


def test_openmetrics_scrape_has_the_same_families_names_and_values(server, traffic):
    plain_type, plain = scrape_as(server.metrics_port, "text/plain; version=0.0.4")
    om_type, om = scrape_as(server.metrics_port, OPENMETRICS)
    assert plain_type == "text/plain; version=0.0.4; charset=utf-8"
    assert om_type.startswith("application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert om.endswith("# EOF\n") and "# EOF" not in plain
    assert not re.search(r"_total[{ ]", plain + om)  # no sample renamed *_total
    families = {f.name: f for f in text_string_to_metric_families(om)}  # the library's strict parser
    types = dict(line.split()[2:4] for line in plain.splitlines() if line.startswith("# TYPE "))
    assert list(families) == list(types)
    for name, kind in types.items():  # OpenMetrics counters must be *_total: Triton's keep their names
        assert families[name].type == ("unknown" if kind == "counter" else kind)
    m = parse(plain)
    assert value(m, "nv_inference_request_success", model="double", version="1") == N_OK
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_summary_us"):  # fmt: skip
        om_samples = {(s.name, frozenset(s.labels.items())): s.value for s in families[name].samples}
        assert om_samples == {k: v for k, v in m.items() if k[0] == name or k[0].startswith(name + "_")}


def test_pending_gauge_counts_queued_requests_then_returns_to_zero(server, traffic):
    client = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    pending = [client.async_infer("double", [x_input([400, 7])]) for _ in range(3)]  # one instance: 2 wait
    seen = 0.0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and seen < 1:
        seen = value(
            parse(scrape(server.metrics_port)), "nv_inference_pending_request_count", model="double", version="1"
        )
        gevent.sleep(0.02)  # the client's greenlets send the requests while the hub has control
    for p in pending:
        p.get_result()
    client.close()
    assert seen >= 1
    m = parse(scrape(server.metrics_port))
    assert value(m, "nv_inference_pending_request_count", model="double", version="1") == 0


def test_cpu_metrics_and_paths(server):
    m = parse(scrape(server.metrics_port, "/metrics/"))
    assert 0.0 <= value(m, "nv_cpu_utilization") <= 1.0
    assert value(m, "nv_cpu_memory_total_bytes") > value(m, "nv_cpu_memory_used_bytes") > 0
    with pytest.raises(urllib.error.HTTPError) as exc:
        scrape(server.metrics_port, "/nope")
    assert exc.value.code == 404


def test_allow_metrics_false_opens_no_port(tmp_path):
    repo = write_repository(tmp_path / "models", {"double": {"config.pbtxt": DOUBLE_CONFIG, "1/model.py": DOUBLE_PY}})
    srv = ServerProcess([repo], ["--allow-metrics=false"]).start()
    try:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", srv.metrics_port)) != 0
    finally:
        srv.stop()


# -- units: no server ------------------------------------------------------------------------------


def _version(stats: ModelStats, decoupled: bool = False) -> SimpleNamespace:
    from inferd.config import ModelConfig

    return SimpleNamespace(name=stats.name, version=int(stats.version), stats=stats, scheduler=None,
                           config=ModelConfig(), decoupled=decoupled)  # fmt: skip


def test_counter_latencies_false_drops_duration_counters():
    stats = ModelStats("m", "1")
    stats.record_execution(1, 1000, 2000, 3000)
    stats.record_success(9000, 500, 1000, 2000, 3000)
    on = parse(text_of([_version(stats)], LatencyConfig()))
    off = parse(text_of([_version(stats)], latency_config([("counter_latencies", "false")])))
    assert value(on, "nv_inference_request_duration_us", model="m", version="1") == 9
    assert not any(name.endswith("_duration_us") for name, _ in off)
    assert value(off, "nv_inference_request_success", model="m", version="1") == 1


def test_failed_execution_counts_execution_not_inference():
    stats = ModelStats("m", "1")
    stats.record_execution(4, 1, 1, 1, succeeded=0)
    stats.record_failure(10, "BACKEND")
    d = stats.as_dict()
    assert (d["execution_count"], d["inference_count"]) == (1, 0)
    assert d["batch_stats"][0]["batch_size"] == 4


def test_render_escapes_labels_and_orders_them():
    f = GaugeMetricFamily("x_total", "help", labels=["version", "model"])
    f.add_metric(["1", 'a"b\\c'], 3)
    assert (
        classic_text(SimpleNamespace(collect=lambda: [f])).decode().splitlines()[-1]
        == 'x_total{model="a\\"b\\\\c",version="1"} 3'
    )


def test_summary_quantiles_over_window():
    windows = LatencyWindows(LatencyConfig(summaries=True, quantiles=parse_quantiles("0.5:0.05,0.9:0.01")), False)
    for us in range(1, 101):
        windows.observe("queue", us * 1000)
    assert windows.quantiles("queue") == [(0.5, 50.0), (0.9, 90.0)]
    windows.config.window_s = 0.0
    time.sleep(0.01)
    assert all(v != v for _, v in windows.quantiles("queue"))  # NaN: the window is empty


def test_cpu_metrics_from_proc(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n")
    (tmp_path / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\n")
    cpu = CpuMetrics(str(tmp_path))
    cpu.update()
    (tmp_path / "stat").write_text("cpu  175 0 100 825 0 0 0 0 0 0\n")  # 75 busy of 100
    cpu.update()
    assert (cpu.sample.utilization, cpu.sample.memory_total, cpu.sample.memory_used) == (0.75, 1024000, 614400)


def test_gpu_metrics_through_nvml_when_present():
    class FakeNvml:
        def __getattr__(self, name):
            values = {
                "nvmlInit": lambda: None, "nvmlDeviceGetCount": lambda: 1, "nvmlDeviceGetHandleByIndex": lambda i: i,
                "nvmlDeviceGetUUID": lambda h: b"GPU-1234", "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=42),
                "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80, used=20),
                "nvmlDeviceGetPowerUsage": lambda h: 150_000, "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
                "nvmlDeviceGetTotalEnergyConsumption": lambda h: 5_000_000, "nvmlShutdown": lambda: None,
            }  # fmt: skip
            return values[name]

    gpu = GpuMetrics.probe(FakeNvml())
    gpu.update()
    s = gpu.samples[0]
    assert (s.uuid, s.utilization, s.memory_used, s.power_usage, s.power_limit, s.energy) == (
        "GPU-1234",
        0.42,
        20,
        150.0,
        700.0,
        0.0,
    )
    assert (
        GpuMetrics.probe(SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("no driver")))).samples
        == []
    )


def test_stats_are_thread_safe_under_concurrent_recording():
    stats = ModelStats("m", "1")

    def work() -> None:
        for _ in range(2000):
            stats.record_execution(2, 1, 1, 1)
            stats.record_success(3, 1, 1, 1, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = stats.snapshot()
    assert (snap["inference_count"], snap["execution_count"], snap["durations"]["success"]) == (
        16000,
        8000,
        (8000, 24000),
    )
