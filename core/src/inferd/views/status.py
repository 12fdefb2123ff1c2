"""The status page (``GET /``) and the JSON it shows (``GET /v2/status``), both admitted as the
model-repository API group, as the repository index is.

The page (``status.html``, one hand-written file of this package, read once at import) fetches the
JSON every few seconds and draws it: the index rows (models, versions, states and reasons), each
split's traffic, the ready versions' statistics (the page turns their counters into rates), and the
tenants' usage when the server has API keys. Everything comes through the data plane, which spans
the workers of ``--workers N`` for statistics and usage.

With ``--status-plots-dir DIR`` the JSON lists the plots in DIR (``.png``, ``.svg``, ``.pdf``,
newest first: the last ``inferd perf --plot DIR/NAME.svg`` leads) and ``GET /v2/status/plots/NAME``
(:func:`status_plot`, the same access group) serves each; the server only reads the folder.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from inferd.auth import ApiGroup, visible_entries
from inferd.contracts.errors import InferdError, NotFound
from inferd.views import results_json

if TYPE_CHECKING:
    from collections.abc import Mapping

    from inferd.contracts.dataplane import DataPlane, ModelStatistics

#: The page's bytes (HTML with its CSS and JS inline).
PAGE = resources.files(__package__).joinpath("status.html").read_bytes()
#: The plots the page links to, by suffix: their content type.
PLOT_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".pdf": "application/pdf"}
#: The most plots listed (the newest).
MAX_PLOTS = 20
#: The headers a plot is served with: an SVG may hold scripts, which must not run on this origin.
PLOT_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "x-content-type-options": "nosniff",
    "cache-control": "no-cache",
}


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
    folder = dp.settings.status_plots
    return {
        "server": {"name": meta.name, "version": meta.version},
        "models": [results_json.repository_entry(e) for e in models],
        "traffic": _traffic(dp, {e.name for e in models if e.traffic}),
        "statistics": statistics,
        "usage": usage,
        "plots": None if folder is None else await asyncio.to_thread(_plots, Path(folder)),
    }


def _plots(folder: Path) -> list[dict[str, Any]]:
    """The plots of ``folder``, newest first (at most :data:`MAX_PLOTS`): name, modification time
    (seconds since the epoch) and the page-relative URL; none when the folder cannot be read."""
    try:
        found = [
            (path.stat().st_mtime, path.name)
            for path in folder.iterdir()
            if path.suffix.lower() in PLOT_TYPES and not path.name.startswith(".") and path.is_file()
        ]
    except OSError:
        return []
    found.sort(reverse=True)
    return [{"name": n, "modified": t, "url": f"v2/status/plots/{quote(n)}"} for t, n in found[:MAX_PLOTS]]


async def status_plot(dp: DataPlane, name: str) -> tuple[bytes, str]:
    """``GET /v2/status/plots/{name}``: the bytes and content type of a plot of ``--status-plots-dir``;
    :class:`~inferd.contracts.errors.NotFound` for a name that is not a plot file directly in it."""
    folder = dp.settings.status_plots
    if folder is None:
        raise NotFound("no plots: the server was started without --status-plots-dir")
    kind = PLOT_TYPES.get(Path(name).suffix.lower())
    if kind is None or Path(name).name != name or name.startswith("."):
        raise NotFound(f"no plot '{name}' in --status-plots-dir (plots are .png, .svg or .pdf files)")
    try:
        return await asyncio.to_thread(_read, Path(folder), name), kind
    except OSError:
        raise NotFound(f"no plot '{name}' in --status-plots-dir {folder}") from None


def _read(folder: Path, name: str) -> bytes:
    path = (folder / name).resolve()
    if path.parent != folder.resolve():  # a link out of the folder
        raise FileNotFoundError(name)
    return path.read_bytes()


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
