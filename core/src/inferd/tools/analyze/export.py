"""Write the best configurations as config.pbtxt files and every measurement as results.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import text_format

from inferd.config import ModelConfig
from inferd.tools.analyze.sweep import CandidateResult, Constraints, Measurement, latency_ms


def config_text(config: ModelConfig, header: str) -> str:
    """config.pbtxt text (protobuf text format), with a comment line on top."""
    body = text_format.MessageToString(config, use_short_repeated_primitives=True)
    return f"# {header}\n{body}"


def write_configs(export: Path, ranked: Sequence[CandidateResult], top_n: int) -> list[Path]:
    """``export/<name>/config.pbtxt`` for the first ``top_n`` measured candidates."""
    paths = []
    for i, c in enumerate([c for c in ranked if c.best is not None][:top_n], start=1):
        best = c.best
        assert best is not None
        note = (
            f"inferd analyze rank {i}: {c.candidate.describe()}; best {best.result.throughput:.1f} infer/sec "
            f"at batch {best.batch_size}, concurrency {best.concurrency}"
            + ("" if c.meets else " (does not meet the constraints)")
        )
        path = export / c.candidate.name / "config.pbtxt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_text(c.candidate.config, note))
        paths.append(path)
    return paths


def measurement_row(c: CandidateResult, m: Measurement, constraints: Constraints) -> dict[str, Any]:
    r = m.result
    cand = c.candidate
    return {
        "config": cand.name,
        "max_batch_size": cand.max_batch_size,
        "instances": cand.instances,
        "dynamic_batching": cand.dynamic_batching,
        "queue_delay_us": cand.queue_delay_us,
        "preferred_batch_size": list(cand.preferred),
        "batch_size": m.batch_size,
        "concurrency": m.concurrency,
        "throughput": round(r.throughput, 3),
        f"p{constraints.latency_percentile}_latency_ms": round(latency_ms(r, constraints.latency_percentile), 3),
        "avg_latency_ms": round(r.avg_latency_us / 1000, 3),
        "request_count": r.request_count,
        "stable": r.stable,
        "meets_constraints": m.meets,
    }


def write_results(
    path: Path, model: str, ranked: Sequence[CandidateResult], exported: Sequence[Path], constraints: Constraints
) -> None:
    """Machine-readable results: the ranking, the exported files and every measurement."""
    doc = {
        "model": model,
        "constraints": {
            "latency_budget_ms": constraints.latency_budget_ms,
            "latency_percentile": constraints.latency_percentile,
            "min_throughput": constraints.min_throughput,
        },
        "ranking": [c.candidate.name for c in ranked],
        "exported": [str(p) for p in exported],
        "configs": [
            {
                "name": c.candidate.name,
                "description": c.candidate.describe(),
                "meets_constraints": c.meets,
                "error": c.error,
                "measurements": [measurement_row(c, m, constraints) for m in c.measurements],
            }
            for c in ranked
        ],
    }
    path.write_text(json.dumps(doc, indent=2))
