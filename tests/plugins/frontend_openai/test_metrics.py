"""The LLM metrics on ``/metrics``: token counters and the TTFT / TPOT histograms, per model and version."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from inferd.testing import ServerProcess

from .chat_model import write_chat_model
from .conftest import OpenAIServer


def samples(server: OpenAIServer) -> dict[str, float]:
    """Every ``inferd_llm_*`` sample of one scrape, by its name and labels as written."""
    text = httpx.get(f"http://127.0.0.1:{server.process.metrics_port}/metrics", timeout=10).text
    found = re.findall(r"^(inferd_llm_\S+) (\S+)$", text, re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_token_counters_and_latency_histograms(openai_server: OpenAIServer) -> None:
    before = samples(openai_server)
    body = {"model": "chat_folder", "prompt": "the quick brown fox", "max_tokens": 4, "n": 3, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    raw = httpx.post(f"{openai_server.base_url}/completions", json=body, timeout=30).text
    usage = httpx.post(
        f"{openai_server.base_url}/completions", json={**body, "stream": False, "stream_options": None}, timeout=30
    ).json()["usage"]
    assert f'"usage":{{"prompt_tokens":{usage["prompt_tokens"]},' in raw  # both requests count the same
    after = samples(openai_server)
    label = '{model="chat_folder",version="1"}'

    def grew(name: str) -> float:
        return after[name + label] - before.get(name + label, 0.0)

    # each choice's prompt counts: 2 requests x 3 choices
    assert grew("inferd_llm_prompt_tokens") == 2 * 3 * usage["prompt_tokens"]
    assert grew("inferd_llm_generation_tokens") == 2 * usage["completion_tokens"]
    assert grew("inferd_llm_time_to_first_token_seconds_count") == 6
    assert grew("inferd_llm_time_per_output_token_seconds_count") == 6
    inf = '{model="chat_folder",version="1",le="+Inf"}'
    assert (
        after["inferd_llm_time_to_first_token_seconds_bucket" + inf]
        == after["inferd_llm_time_to_first_token_seconds_count" + label]
    )
    assert 0 < grew("inferd_llm_time_to_first_token_seconds_sum") < 6 * 30


def test_openmetrics_scrape_parses(openai_server: OpenAIServer) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    httpx.post(
        f"{openai_server.base_url}/completions", json={"model": "chat", "prompt": "hi", "max_tokens": 2}, timeout=30
    )
    accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
    text = httpx.get(f"http://127.0.0.1:{openai_server.process.metrics_port}/metrics", headers=accept, timeout=10).text
    kinds = {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("inferd_llm_")}
    assert kinds == {"inferd_llm_prompt_tokens": "unknown", "inferd_llm_generation_tokens": "unknown",
                     "inferd_llm_time_to_first_token_seconds": "histogram",
                     "inferd_llm_time_per_output_token_seconds": "histogram"}  # fmt: skip


def test_counts_are_summed_over_workers(tmp_path: Path) -> None:
    """With ``--workers 2`` a scrape (answered by one worker) counts every worker's requests, per
    model and version (before, each worker showed only its own)."""
    repo = tmp_path / "models"
    write_chat_model(repo, "chat")
    args = ["--workers", "2", "--openai-port", "0", "--openai-address", "127.0.0.1"]
    with ServerProcess([repo], args) as process:
        url = f"http://127.0.0.1:{process.ports['openai']}/v1/completions"
        body = {"model": "chat", "prompt": "the quick brown fox", "max_tokens": 2}
        requests = 12
        for _ in range(requests):  # a connection each: the kernel spreads them over the workers
            with httpx.Client() as client:
                prompt_tokens = client.post(url, json=body, timeout=30).json()["usage"]["prompt_tokens"]
        label = '{model="chat",version="1"}'
        want = requests * prompt_tokens
        # Each scrape is answered by either worker (the kernel picks), whichever served the requests:
        # ten in a row must all count every request (the other workers' counts are asked live).
        got = [samples(OpenAIServer(process, 0)).get("inferd_llm_prompt_tokens" + label, 0.0) for _ in range(10)]
        assert got == [want] * 10
