"""The status page (``GET /``) and the JSON it shows (``GET /v2/status``), both admitted as the
model-repository API group, as the repository index is.

The page (``status.html``, one hand-written file of this package, read once at import) fetches the
JSON every few seconds and draws it: the index rows (models, versions, states and reasons), each
split's traffic, the ready versions' statistics (the page turns their counters into rates), and the
tenants' usage when the server has API keys. Everything comes through the data plane, which spans
the workers of ``--workers N`` for statistics and usage.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from inferd.auth import ApiGroup, visible_entries
from inferd.contracts.errors import InferdError
from inferd.views import results_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from inferd.contracts.dataplane import DataPlane, ModelStatistics

#: The page's bytes (HTML with its CSS and JS inline).
PAGE = resources.files(__package__).joinpath("status.html").read_bytes()


async def status_view(dp: DataPlane, headers: Mapping[str, str]) -> dict[str, Any]:
    """What the page shows, as the request being served may see it (``headers``: by lowercase name).

    ``statistics`` is None when the request may not read the statistics API group; ``usage`` is
    None without API keys (``--auth-config``)."""
    access = dp.settings.access
    policy = access.http if access is not None else None
    models = visible_entries(dp.repository_index())
    statistics = None
    if policy is None or policy.permits(ApiGroup.STATISTICS, headers):
        statistics = [_figures(s) for s in visible_entries(await dp.model_statistics())]
    usage = None
    if access is not None and access.keys is not None:
        usage = results_json.usage(await dp.tenant_usage())
    meta = dp.server_metadata()
    return {
        "server": {"name": meta.name, "version": meta.version},
        "models": [results_json.repository_entry(e) for e in models],
        "traffic": _traffic(dp, {e.name for e in models if e.traffic}),
        "statistics": statistics,
        "usage": usage,
    }


def _figures(s: ModelStatistics) -> dict[str, Any]:
    """The counters the page turns into rates: counts and the nanoseconds they took, cumulative."""
    durations = {k: {"count": d.count, "ns": d.ns} for k, d in s.inference_stats.items()}
    return {
        "name": s.name,
        "version": s.version,
        "last_inference": s.last_inference,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": durations,
    }


def _traffic(dp: DataPlane, names: set[str]) -> dict[str, Any]:
    """The traffic of each split model of ``names`` (weights, shares, states, the canary policy and
    its decisions)."""
    splits = {}
    for name in sorted(names):
        try:
            splits[name] = results_json.traffic(dp.traffic(name))
        except InferdError:  # unloaded since the index was read
            continue
    return splits
