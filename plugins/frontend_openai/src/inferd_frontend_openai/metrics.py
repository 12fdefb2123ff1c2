"""LLM metrics of the requests the OpenAI API served, per model and version, for ``/metrics``.

Observed on the event loop as each choice finishes (a choice cut short by its client is not
counted); collected by the metrics frontend's registry at scrape time.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

#: vLLM's buckets for the same two histograms, in seconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
LABELS = ["model", "version"]
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


@dataclass
class Histogram:
    """Counts per bucket (not cumulative) and the sum of what was observed."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass
class ModelLlmStats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))


class LlmMetrics:
    """Per-model, per-version token counters and latency histograms (a canary of an LLM is judged by
    them); a metrics source (:data:`inferd.api.SOURCES`: summed over ``--workers N``)."""

    def __init__(self) -> None:
        self.models: dict[tuple[str, str], ModelLlmStats] = {}

    def choice_done(
        self, model: str, version: str, prompt_tokens: int, tokens: int, first_s: float | None, last_s: float
    ) -> None:
        """One finished choice of ``model`` ``version``: its token counts, and when its first and last
        text came (seconds after the request arrived; ``first_s`` None when it sent no text)."""
        key = (model, version)
        stats = self.models.get(key)
        if stats is None:
            stats = self.models[key] = ModelLlmStats()
        stats.prompt_tokens += prompt_tokens
        stats.generation_tokens += tokens
        if first_s is not None:
            stats.ttft.observe(first_s)
            if tokens > 1:
                stats.tpot.observe((last_s - first_s) / (tokens - 1))

    def collect(self) -> Iterator[Metric]:
        """The four families; none before a request was served (no family goes out empty)."""
        if not self.models:
            return
        prompt = CounterMetricFamily("inferd_llm_prompt_tokens", "Prompt tokens of OpenAI API requests", labels=LABELS)
        generated = CounterMetricFamily(
            "inferd_llm_generation_tokens", "Tokens generated for OpenAI API requests", labels=LABELS
        )
        ttft = HistogramMetricFamily(
            "inferd_llm_time_to_first_token_seconds",
            "Time from a request's arrival to its first text, per choice",
            labels=LABELS,
        )
        tpot = HistogramMetricFamily(
            "inferd_llm_time_per_output_token_seconds",
            "Time between a choice's first and last text, per token after the first",
            labels=LABELS,
        )
        for key, stats in sorted(self.models.items()):
            labels = list(key)
            prompt.add_metric(labels, stats.prompt_tokens)
            generated.add_metric(labels, stats.generation_tokens)
            ttft.add_metric(labels, stats.ttft.buckets(), stats.ttft.total)
            tpot.add_metric(labels, stats.tpot.buckets(), stats.tpot.total)
        yield from (prompt, generated, ttft, tpot)
