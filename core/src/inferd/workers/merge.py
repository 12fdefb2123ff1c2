"""Sums of the workers' statistics, in Triton's shapes (what one server would have counted)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from inferd.contracts.metric_sources import SUMMED_TYPES

#: (name, version, n): the n-th ``model_stats`` entry of that name and version in a worker's list
#: (entries, in Triton's shape, do not name their repository). Names repeat only with
#: ``--model-namespacing`` (one per repository); every worker lists them in the same order (by
#: repository), so the n-th of one worker is the n-th of another.
Key = tuple[str, str, int]


#: (name, version, namespace) of a metric snapshot row: its model's repository with
#: ``--model-namespacing`` ("" without), so each repository's series is summed on its own.
RowKey = tuple[str, str, str]


def keys(pairs: Iterable[tuple[str, str]]) -> Iterator[Key]:
    """The :data:`Key` of each (name, version) of one worker's list, in order."""
    seen: dict[tuple[str, str], int] = {}
    for name, version in pairs:
        n = seen[(name, version)] = seen.get((name, version), -1) + 1
        yield name, version, n


def _add(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Add ``other``'s counters to ``into`` (nested dicts of ints, batch lists by batch size)."""
    for key, value in other.items():
        mine = into.get(key)
        if mine is None:
            into[key] = value
        elif key == "last_inference":
            into[key] = max(mine, value)
        elif key == "batch_stats":
            into[key] = _add_batches(mine, value)
        elif isinstance(value, dict):
            _add(mine, value)
        elif isinstance(value, bool) or not isinstance(value, int):
            continue  # names, versions, memory usage: the same on every worker
        else:
            into[key] = mine + value


def _add_batches(mine: list[dict[str, Any]], other: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_size = {b["batch_size"]: b for b in mine}
    for batch in other:
        if batch["batch_size"] in by_size:
            _add(by_size[batch["batch_size"]], {k: v for k, v in batch.items() if k != "batch_size"})
        else:
            by_size[batch["batch_size"]] = batch
    return [by_size[size] for size in sorted(by_size)]


def statistics(local: list[dict[str, Any]], peers: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``model_stats`` entries summed per :data:`Key`; this worker's order and entries decide
    what is listed (a version only a peer still serves is left out)."""
    by_key = dict(zip(keys((s["name"], s["version"]) for s in local), local, strict=True))
    for entries in peers:
        for key, entry in zip(keys((e["name"], e["version"]) for e in entries), entries, strict=True):
            mine = by_key.get(key)
            if mine is not None:
                _add(mine, entry)
    return local


def snapshots(peers: list[list[list[Any]]]) -> dict[RowKey, dict[str, Any]]:
    """Peers' metric snapshots (``[name, version, snapshot, namespace]`` rows) summed per :data:`RowKey`;
    durations come back as ``(count, ns)`` tuples, as :meth:`ModelStats.snapshot` gives them."""
    out: dict[RowKey, dict[str, Any]] = {}
    for rows in peers:
        for name, version, snap, namespace in rows:
            key = (name, str(version), namespace)
            snap["durations"] = {k: {"count": c, "ns": ns} for k, (c, ns) in snap["durations"].items()}
            mine = out.get(key)
            if mine is None:
                out[key] = snap
            else:
                _add(mine, snap)
    for snap in out.values():
        snap["durations"] = {k: (d["count"], d["ns"]) for k, d in snap["durations"].items()}
    return out


def add_statistics(mine: list[dict[str, Any]], other: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``model_stats`` entries of two workers summed per :data:`Key`, every entry kept."""
    by_key = dict(zip(keys((s["name"], s["version"]) for s in mine), mine, strict=True))
    for key, entry in zip(keys((e["name"], e["version"]) for e in other), other, strict=True):
        if key in by_key:
            _add(by_key[key], entry)
        else:
            by_key[key] = entry
    return list(by_key.values())


def add_snapshot_rows(mine: list[list[Any]], other: list[list[Any]]) -> list[list[Any]]:
    """Two workers' snapshot rows (``[name, version, snapshot, namespace]``) summed into one row per version."""
    return [[name, version, snap, ns] for (name, version, ns), snap in snapshots([mine, other]).items()]


def add_sources(mine: list[list[Any]], other: list[list[Any]]) -> list[list[Any]]:
    """Two workers' plugin metric families (``[name, type, help, [[sample, labels, value]...]]``):
    counters and histograms summed per sample and labels; gauges left out."""
    families: dict[str, list[Any]] = {}
    values: dict[tuple[str, str, str], float] = {}
    for name, kind, text, samples in [*mine, *other]:
        if kind not in SUMMED_TYPES:
            continue
        families.setdefault(name, [name, kind, text, []])
        for sample, labels, value in samples:
            key = (name, sample, json.dumps(labels, sort_keys=True))
            if key not in values:
                families[name][3].append([sample, labels, 0])
            values[key] = values.get(key, 0) + value
    for name, _, _, samples in families.values():
        for row in samples:
            row[2] = values[(name, row[0], json.dumps(row[1], sort_keys=True))]
    return list(families.values())
