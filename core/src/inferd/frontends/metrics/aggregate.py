"""``--workers N``: each serving version's counters plus the other workers' (one server's metrics).

Counters (requests, failures, inferences, executions, durations) are summed over the workers, and
so is the pending-request gauge (over the workers that answered: what each holds now); latency
summaries and histograms and the load duration are those of the worker that answered the scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferd.contracts.dataplane import ServingVersion, VersionCounters
    from inferd.contracts.stats import LatencyObserver


def add_snapshot(local: dict[str, Any], other: Mapping[str, Any] | None) -> dict[str, Any]:
    """``local`` (a :meth:`ModelStats.snapshot`) plus ``other`` (the other workers' sum, from
    :attr:`OtherWorkers.snapshots <inferd.contracts.dataplane.OtherWorkers.snapshots>`)."""
    if other is None:
        return local
    durations = {
        k: (c + other["durations"].get(k, (0, 0))[0], ns + other["durations"].get(k, (0, 0))[1])
        for k, (c, ns) in local["durations"].items()
    }
    failures = {r: n + other["failures"].get(r, 0) for r, n in local["failures"].items()}
    return {
        **local,
        "durations": durations,
        "failures": failures,
        "inference_count": local["inference_count"] + other["inference_count"],
        "execution_count": local["execution_count"] + other["execution_count"],
    }


class SummedStats:
    """What the collectors read of a :class:`~inferd.contracts.stats.VersionStats`, with the peers' counters added."""

    def __init__(self, local: VersionCounters, peers: Mapping[str, Any] | None) -> None:
        self.local = local
        self.peers = dict(peers) if peers is not None else None
        #: This worker's latency windows (made at the version's attach, before any scrape).
        self.observer: LatencyObserver | None = local.observer

    def snapshot(self) -> dict[str, Any]:
        return add_snapshot(self.local.snapshot(), self.peers)


class SummedVersion:
    """A serving version as the collectors see it, its ``stats`` summed over the workers."""

    def __init__(self, version: ServingVersion, peers: Mapping[str, Any] | None, peer_pending: int = 0) -> None:
        self._version = version
        #: Requests the other live workers hold queued for this version.
        self.peer_pending = peer_pending
        self.name = version.name
        self.version = version.version
        self.namespace = version.namespace
        self.config = version.config
        self.decoupled = version.decoupled
        self.stats = SummedStats(version.stats, peers)

    def __getattr__(self, name: str) -> Any:  # scheduler (pending), cache: this worker's
        return getattr(self._version, name)


def summed(
    versions: list[ServingVersion],
    others: Mapping[tuple[str, str, str], Mapping[str, Any]],
    live: Sequence[Mapping[str, Any]] = (),
) -> list[SummedVersion]:
    """``versions`` with every other worker's counters (snapshots summed by (name, version, namespace))
    added, and the queued requests of the workers that answered (``live``, see
    :class:`~inferd.contracts.dataplane.OtherWorkers`)."""
    pending: dict[tuple[str, str, str], int] = {}
    for worker in live:
        for name, version, namespace, count in worker.get("pending", ()):
            key = (name, str(version), namespace)
            pending[key] = pending.get(key, 0) + int(count)
    return [
        SummedVersion(mv, others.get(key), pending.get(key, 0))
        for mv in versions
        for key in [(mv.name, str(mv.version), mv.namespace)]
    ]
