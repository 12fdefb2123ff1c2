"""The data plane's typed results as Triton's JSON: what the HTTP frontend sends, and what the
gRPC frontend builds its messages from (``json_format`` for statistics, field by field elsewhere)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from inferd.contracts.dataplane import (
        Duration,
        LogSettings,
        ModelMetadata,
        ModelStatistics,
        RepositoryEntry,
        ServerMetadata,
        TraceSettings,
        Traffic,
        UsageCounts,
        UsageReport,
    )
    from inferd.contracts.model_info import TensorInfo


def server_metadata(meta: ServerMetadata) -> dict[str, Any]:
    return {"name": meta.name, "version": meta.version, "extensions": list(meta.extensions)}


def _tensor(tensor: TensorInfo) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


def model_metadata(meta: ModelMetadata) -> dict[str, Any]:
    return {
        "name": meta.name,
        "versions": list(meta.versions),
        "platform": meta.platform,
        "inputs": [_tensor(t) for t in meta.inputs],
        "outputs": [_tensor(t) for t in meta.outputs],
    }


def repository_entry(entry: RepositoryEntry) -> dict[str, str]:
    """One index row; like Triton, empty fields are left out."""
    row = {"name": entry.name}
    for key in ("version", "state", "reason", "traffic"):
        value = getattr(entry, key)
        if value:
            row[key] = value
    return row


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def _durations(by_name: Mapping[str, Duration]) -> dict[str, dict[str, int]]:
    return {k: _duration(d) for k, d in by_name.items()}


def statistics(s: ModelStatistics) -> dict[str, Any]:
    """Triton's ``model_stats`` entry."""
    entry: dict[str, Any] = {
        "name": s.name,
        "version": s.version,
        "last_inference": s.last_inference,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": _durations(s.inference_stats),
        "response_stats": {i: _durations(r) for i, r in s.response_stats.items()},
        "batch_stats": [
            {
                "batch_size": b.batch_size,
                "compute_input": _duration(b.compute_input),
                "compute_infer": _duration(b.compute_infer),
                "compute_output": _duration(b.compute_output),
            }
            for b in s.batch_stats
        ],
        "memory_usage": list(s.memory_usage),
    }
    if s.traffic is not None:
        t = s.traffic
        entry["traffic"] = {"state": t.state, "weight": t.weight, "rollbacks": t.rollbacks, "promotions": t.promotions}
    return entry


def trace_settings(t: TraceSettings) -> dict[str, Any]:
    """Triton's trace settings: strings everywhere, a list of strings for the level."""
    return {
        "trace_level": list(t.trace_level),
        "trace_rate": t.trace_rate,
        "trace_count": t.trace_count,
        "log_frequency": t.log_frequency,
        "trace_file": t.trace_file,
        "trace_mode": t.trace_mode,
    }


def log_settings(s: LogSettings) -> dict[str, Any]:
    return {
        "log_file": s.log_file,
        "log_info": s.log_info,
        "log_warning": s.log_warning,
        "log_error": s.log_error,
        "log_verbose_level": s.log_verbose_level,
        "log_format": s.log_format,
    }


def traffic(t: Traffic) -> dict[str, Any]:
    """A model's split, as ``docs/traffic.md`` shows it."""
    versions = {
        v: {
            "weight": d.weight,
            "share": d.share,
            "state": d.state,
            "rollbacks": d.rollbacks,
            "promotions": d.promotions,
            "window": d.window,
        }
        for v, d in t.versions.items()
    }
    if t.policy is None:
        return {"model": t.model, "weights": dict(t.weights), "versions": versions}
    return {
        "model": t.model,
        "weights": dict(t.weights),
        "source": t.source,
        "versions": versions,
        "policy": t.policy,
        "last_check": t.last_check,
        "decisions": list(t.decisions or ()),
        "shadow": t.shadow,
    }


def _counts(c: UsageCounts) -> dict[str, int]:
    return {
        "success_requests": c.success_requests,
        "failure_requests": c.failure_requests,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
    }


def usage(u: UsageReport) -> dict[str, Any]:
    """``GET /v2/usage``: ``{"tenants": {tenant: {"models": {model: {...}}, "totals": {...}}}}``."""
    return {
        "tenants": {
            name: {"models": {m: _counts(c) for m, c in t.models.items()}, "totals": _counts(t.totals)}
            for name, t in u.tenants.items()
        }
    }
