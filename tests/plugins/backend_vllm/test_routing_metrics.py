"""``--routing-metrics`` on a pod of two vLLM engines (``llm`` with a LoRA adapter, ``plain``), read
by the endpoint picker's and production-stack's rules (tests/router_rules.py): the pod's running
and waiting requests are the sum over the engines, the KV-cache use the largest, vLLM's older
gauge names and ``vllm:cache_config_info`` / ``vllm:lora_requests_info`` are there, and the text
is valid exposition. Each engine admits two sequences at a time (``max_num_seqs``), so three long
requests per engine keep two running and one waiting."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.http_calls import http_call
from tests.metrics_text import scrape
from tests.plugins.backend_vllm.conftest import ENV, SKIP, START_S, short_tmp, started, write_lora
from tests.router_rules import families, picker_lora, picker_value, production_stack
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]
MODELS = ("llm", "plain")


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory, chat_llama: Path) -> Iterator[ServerProcess]:
    from inferd_backend_vllm.tiny_model import write_vllm_repository

    work = tmp_path_factory.mktemp("routing")
    repo = work / "repo"
    write_vllm_repository(repo, chat_llama, "llm", max_num_seqs=2, enable_lora="true", max_lora_rank=8)
    (repo / "llm" / "1" / "multi_lora.json").write_text(json.dumps({"sql": str(write_lora(work / "sql"))}))
    write_vllm_repository(repo, chat_llama, "plain", max_num_seqs=2)
    tmp = short_tmp()
    server = ServerProcess([repo], ["--routing-metrics=true", "--allow-openai=false"], env={**ENV, "TMPDIR": str(tmp)})
    try:
        yield started(server, START_S)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _generate(server: ServerProcess, model: str, tokens: int, **extra: object) -> None:
    sampling = json.dumps({"max_tokens": tokens, "ignore_eos": True, "temperature": 0})
    body = json.dumps({"text_input": "hello", "sampling_parameters": sampling, **extra}).encode()
    status, raw = http_call(f"http://{server.http_url}/v2/models/{model}/generate", "POST", body, timeout=600)
    assert status == 200, raw


def test_idle_pod_families(pod: ServerProcess) -> None:
    _generate(pod, "llm", 2, lora_name="sql")  # the adapter once, so vLLM records its LoRA gauge
    text = scrape(pod)
    found = families(text)  # raises on invalid exposition
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert found[name][0].labels == {}, name
        assert {s.labels["model_name"] for s in found[name][1:]} == set(MODELS), name
    assert picker_value(text, "vllm:num_requests_waiting") == 0
    assert picker_value(text, "vllm:num_requests_running") == 0
    infos = found["vllm:cache_config_info"]
    assert len(infos) == 2 and all(int(s.labels["num_gpu_blocks"]) > 0 and s.labels["block_size"] for s in infos)
    lora = found["vllm:lora_requests_info"]
    assert lora[0].labels["max_lora"] == "1"  # llm's (vLLM's default max_loras); plain has none
    assert lora[0].value == max(s.value for s in lora)
    stats = production_stack(text)
    hits = sum(s.value for s in found["vllm:prefix_cache_hits"] if s.name.endswith("_total"))
    queries = sum(s.value for s in found["vllm:prefix_cache_queries"] if s.name.endswith("_total"))
    assert queries > 0 and stats["prefix_hit_rate"] == pytest.approx(hits / queries)
    assert stats["kv_cache"] == max(s.value for s in found["vllm:kv_cache_usage_perc"])


def test_running_and_waiting_under_load(pod: ServerProcess) -> None:
    threads = [threading.Thread(target=_generate, args=(pod, model, 200)) for model in MODELS for _ in range(3)]
    for thread in threads:
        thread.start()
    seen: dict[str, float | None] = {}

    def loaded() -> bool:
        text = scrape(pod)
        seen.update(
            waiting=picker_value(text, "vllm:num_requests_waiting"),
            running=picker_value(text, "vllm:num_requests_running"),
            llm_running=picker_value(text, "vllm:num_requests_running{model_name=llm}"),
            plain_waiting=picker_value(text, "vllm:num_requests_waiting{model_name=plain}"),
            kv=picker_value(text, "vllm:kv_cache_usage_perc"),
            legacy_kv=production_stack(text)["kv_cache"],
        )
        return seen == {**seen, "waiting": 2, "running": 4, "llm_running": 2, "plain_waiting": 1}

    try:
        wait_for(loaded, timeout=300, what="two running and one waiting request per engine")
        assert seen["kv"] is not None and seen["kv"] > 0 and seen["legacy_kv"] == seen["kv"]
        lora = picker_lora(scrape(pod))
        assert lora is None or lora.max_lora == 1  # no request names the adapter now
    finally:
        for thread in threads:
            thread.join(600)
    wait_for(lambda: picker_value(scrape(pod), "vllm:num_requests_running") == 0, timeout=120, what="an idle pod")


def test_orca_report_on_generate(pod: ServerProcess) -> None:
    """Triton's ORCA figures for an LLM pod: the KV-cache use and the KV-cache capacity in tokens
    (blocks × block size of each engine, as ``vllm:cache_config_info`` says)."""
    sampling = json.dumps({"max_tokens": 2, "temperature": 0})
    body = json.dumps({"text_input": "hello", "sampling_parameters": sampling}).encode()
    request = urllib.request.Request(f"http://{pod.http_url}/v2/models/plain/generate", body,
                                     {"endpoint-load-metrics-format": "json"}, method="POST")  # fmt: skip
    with urllib.request.urlopen(request, timeout=300) as response:
        kind, _, doc = response.headers["endpoint-load-metrics"].partition(" ")
    assert kind == "JSON"
    named = json.loads(doc)["named_metrics"]
    infos = families(scrape(pod))["vllm:cache_config_info"]
    assert named["max_token_capacity"] == sum(
        int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"]) for s in infos
    )
    assert 0 <= named["kv_cache_utilization"] <= 1 and named["kv_cache_usage_perc"] == named["kv_cache_utilization"]
    assert named["num_requests_waiting"] == 0 and named["pending_requests"] == 0
