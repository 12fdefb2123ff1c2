"""The server's own run state: live, accepting requests, the event loop it runs on, and readiness.

The :class:`~inferd.host.server.Server` owns one and is its only writer; the data plane reports it
(health routes) and the router uses its loop to run requests for instance threads.

Readiness follows Triton's ``--strict-readiness``, with inferd's rule for versions: with it (the
default) the server is ready once it started *and* every model it knows of serves. "Knows of" is
every model record the lifecycle keeps: in modes ``none`` and ``poll`` every model of the
repositories, in mode ``explicit`` those loaded by ``--load-model`` or through the repository API.
A model serves when at least one of its versions is READY (a new version that failed to load
beside a serving one leaves it serving: the failure shows in the repository index and the log, not
in readiness), or when every version of it was left on purpose (unloaded, removed from the
repository). A model none of whose versions serves after a failure keeps the server unready until
a later load succeeds. Triton is stricter: any version that failed counts
(:func:`all_versions_loaded`, still the rule for ``--exit-on-error`` at start-up).

Under poll, a model that appears in the repository after start-up is the exception: its failure
to load leaves it UNAVAILABLE with its reason in the repository index, and the server ready (one
typo in a new model would otherwise take every replica out of a load balancer). The models the
server started with, and those loaded on request, keep the rule above.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Protocol

from inferd.engine.states import ModelRecord, State, VersionState, Why

#: Reasons of a version that is not READY on purpose: it does not make the server unready.
_LEFT_ON_PURPOSE = frozenset({Why.UNLOADED, Why.REMOVED, Why.DEPENDENCY})


class ModelRecords(Protocol):
    """Where readiness reads the model states from (the server's :class:`~inferd.engine.model_table.ModelTable`)."""

    @property
    def records(self) -> Mapping[str, ModelRecord]: ...

    @property
    def poll_added(self) -> AbstractSet[str]:
        """Models that appeared under poll after start-up: their state does not count."""
        ...


def _left_on_purpose(state: VersionState) -> bool:
    return (state.state is State.UNAVAILABLE and state.why in _LEFT_ON_PURPOSE) or state.state is State.EVICTED


def model_is_ready(record: ModelRecord) -> bool:
    """inferd's strict-readiness rule for one model: a version of it is READY, or every version of
    it was unloaded on purpose (a model with no version yet, or a model-level failure, is not)."""
    states = [record.current(v, s) for v, s in list(record.versions.items())]  # a copy: the loop may write
    # it while a control thread reads
    return any(s.state is State.READY for s in states) or (bool(states) and all(map(_left_on_purpose, states)))


def all_versions_loaded(record: ModelRecord) -> bool:
    """Triton's rule (its ``IsReady``, and what ``--exit-on-error`` checks at start-up): the model
    has versions, each READY or unloaded on purpose; one version that failed to load fails it."""
    states = [record.current(v, s) for v, s in list(record.versions.items())]
    return bool(states) and all(s.state is State.READY or _left_on_purpose(s) for s in states)


def unready_models(records: Iterable[ModelRecord]) -> list[str]:
    """The names of the models that keep a strict server from being ready, sorted."""
    return sorted(r.name for r in list(records) if not model_is_ready(r))


@dataclass
class ServerHealth:
    """Written by the server as it starts and stops; read by everything built for it."""

    #: The process serves (``/v2/health/live``): set once start-up began, cleared at the end.
    live: bool = False
    #: Start-up loading finished and every frontend listens.
    accepting: bool = False
    #: The loop serving requests, once started (Python models calling models need it).
    loop: asyncio.AbstractEventLoop | None = None
    #: ``--strict-readiness``: readiness also needs every model of these records READY
    #: (``None``: ready as soon as the server started, whatever the models' states).
    models: ModelRecords | None = None
    #: Start-up errors the server ran on with ``--exit-on-error=false`` (a model repository that
    #: does not exist): it is never ready, as Triton is not.
    errors: list[str] = field(default_factory=list)

    @property
    def started(self) -> bool:
        """Live and accepting requests, whatever the models' states."""
        return self.live and self.accepting

    def ready(self) -> bool:
        """``/v2/health/ready``: started, and with ``models`` every model READY (or unloaded)."""
        if not self.started or self.errors:
            return False
        models = self.models
        if models is None:
            return True
        records, added = list(models.records.values()), models.poll_added  # a copy: see model_is_ready
        return not unready_models(r for r in records if r.name not in added)
