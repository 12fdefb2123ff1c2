"""The /metrics text through prometheus_client: Triton's bytes for a fixed state, OpenMetrics on request.

``tests/fixtures/metrics/triton_text.txt`` was written by the hand-rolled renderer that the
collectors replaced, for the state built here; the classic format must stay byte-identical to it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from inferd.config import ModelConfig
from inferd.contracts.stats import ModelStats
from inferd.frontends.metrics.collectors import ModelCollector, SystemCollector
from inferd.frontends.metrics.exposition import CONTENT_TYPE, scrape
from inferd.frontends.metrics.latency import LatencyConfig, LatencyWindows
from inferd.frontends.metrics.system import CpuMetrics, GpuMetrics

GOLDEN = Path(__file__).parents[1] / "fixtures" / "metrics" / "triton_text.txt"
CONFIG = LatencyConfig(summaries=True, histograms=True)


def _version(name: str, version: int, cached: bool) -> SimpleNamespace:
    stats = ModelStats(name, str(version))
    stats.observer = LatencyWindows(CONFIG, False, (1.0, 2.5, 100.0))
    stats.load_duration_ns = 1_234_567_891 if version != 3 else 0
    for i in range(4):
        stats.record_execution(1, 1000 + i, 2_000_500 + i, 3000)
        stats.record_success(2_500_000 + 1000 * i, 500 + i, 1000, 2_000_500, 3000)
    stats.record_failure(10, "BACKEND")
    if cached:
        stats.record_cache(True, 7777, 8888, 11)
        stats.record_cache(False, 9999, 12121, 13)
    return SimpleNamespace(name=name, version=version, stats=stats, scheduler=None, config=ModelConfig(),
                           decoupled=False, cache=object() if cached else None)  # fmt: skip


def _cpu(proc: Path) -> CpuMetrics:
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n")
    (proc / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\n")
    cpu = CpuMetrics(str(proc))
    cpu.update()
    (proc / "stat").write_text("cpu  175 0 100 825 0 0 0 0 0 0\n")
    cpu.update()
    return cpu


def _gpu() -> GpuMetrics:
    nvml = SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}".encode(), nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=42),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80, used=20),
        nvmlDeviceGetPowerUsage=lambda h: 150_000, nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 5_000_000, nvmlShutdown=lambda: None,
    )  # fmt: skip
    gpu = GpuMetrics.probe(nvml)
    gpu.update()
    return gpu


@pytest.fixture
def registry(tmp_path: Path) -> CollectorRegistry:
    versions = [_version("alpha", 1, False), _version("alpha", 3, False), _version('b"q\\z', 2, True)]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ModelCollector(lambda: versions, CONFIG))
    registry.register(SystemCollector(_cpu(tmp_path), _gpu()))
    return registry


def test_classic_text_is_byte_identical_to_the_hand_rolled_renderer(registry):
    for accept in ("", "text/plain", "text/plain; version=0.0.4", "text/plain; version=1.0.0", "*/*"):
        body, content_type = scrape(registry, accept)
        assert content_type == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
        assert body == GOLDEN.read_bytes(), accept


def test_openmetrics_keeps_triton_names_and_types(registry):
    body, content_type = scrape(registry, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    classic = GOLDEN.read_text().splitlines()
    types = dict(line.split()[2:4] for line in classic if line.startswith("# TYPE "))
    assert list(families) == list(types)
    for name, kind in types.items():
        assert families[name].type == ("unknown" if kind == "counter" else kind)
    samples = {(s.name, frozenset(s.labels.items())): s.value for f in families.values() for s in f.samples}
    assert len(samples) == sum(1 for line in classic if not line.startswith("#"))
    assert samples[("nv_inference_request_success", frozenset({("model", "alpha"), ("version", "1")}))] == 4
    assert samples[("nv_energy_consumption", frozenset({("gpu_uuid", "GPU-1")}))] == 0
    bucket = frozenset({("model", "alpha"), ("version", "1"), ("le", "2.5")})
    assert samples[("nv_inference_first_response_histogram_ms_bucket", bucket)] == 4  # 2.500-2.503 ms: 2 ms
