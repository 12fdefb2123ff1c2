"""What the server serves right now: every model's record, and the last repository scan.

The lifecycle writes it (loads, swaps, unloads); the data plane, the router that runs requests
and the metrics frontend read it. It holds no behaviour beyond lookups, so every reader can be
built before the lifecycle and nothing needs a back-reference to it.

Records are keyed as the repository scan keys models (``repository.model_key``): by name, or
with ``--model-namespacing`` by repository and name. Requests name a model only by name: a name
held by one model resolves to it, one held by several (in several repositories) is refused with
Triton's sentence. Resolving a name is one dict lookup either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from inferd.auth.policy import unknown_model, visible_names
from inferd.contracts.errors import InvalidArgument, NotFound
from inferd.engine.states import ModelRecord, State, Why
from inferd.engine.traffic import Traffic
from inferd.repository.scan import Snapshot, model_key

if TYPE_CHECKING:
    from inferd.contracts.model_info import ModelInfo
    from inferd.engine.version import ModelVersion
    from inferd.repository.scan import ModelSource


class OnDemandLoads(Protocol):
    """What the router asks of on-demand loading (:class:`inferd.lifecycle.on_demand.OnDemand`)."""

    def pending(self, name: str, version: str = "") -> ModelInfo | None:
        """A placeholder for a model in the repository that serves no version, or None."""
        ...

    async def ready(self, name: str, version: str = "") -> ModelInfo:
        """The version serving ``name`` once it loaded (this request's load or one under way)."""
        ...


class ModelTable:
    """Model records by key, and the repository snapshot they were loaded from."""

    def __init__(self, namespacing: bool = False, traffic: Traffic | None = None) -> None:
        #: ``--model-namespacing``: the same name may be found in several repositories.
        self.namespacing = namespacing
        #: Weighted versions: how requests naming no version are split (:mod:`inferd.engine.traffic`).
        self.traffic = traffic or Traffic()
        self.records: dict[str, ModelRecord] = {}
        self._snapshot = Snapshot()
        #: The record each name a request may use resolves to: ``records`` itself without namespacing.
        self.by_name: dict[str, ModelRecord] = self.records
        #: Names held by several models (with namespacing), and how many.
        self.ambiguous: dict[str, int] = {}
        #: Each name's keys, among the records and the last scan (with namespacing).
        self._keys: dict[str, list[str]] = {}
        #: Models (keys) that appeared under poll after start-up (the lifecycle writes it): with
        #: ``--strict-readiness`` their failures leave the server ready (see :mod:`inferd.engine.health`).
        self.poll_added: set[str] = set()
        #: How a model that is not loaded gets loaded under this server's control mode (the
        #: lifecycle writes it); ``{name}`` stands for the model's name.
        self.load_advice = ""
        #: ``--model-load-on-demand``: loads a model a request names that serves no version (the
        #: lifecycle sets it; :mod:`inferd.lifecycle.on_demand`). The router asks it.
        self.on_demand: OnDemandLoads | None = None

    # -- writing (the lifecycle) -------------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @snapshot.setter
    def snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._reindex()

    def record(self, source: ModelSource) -> ModelRecord:
        """The record of the model ``source`` holds, made on first use."""
        record = self.records.get(source.key)
        if record is None:
            record = self.records[source.key] = ModelRecord(source.name, source.namespace)
            self._reindex()
        return record

    def forget(self, key: str) -> None:
        """Drop the record of ``key`` (if any)."""
        if self.records.pop(key, None) is not None:
            self._reindex()

    def _reindex(self) -> None:
        """Rebuild the name lookups (namespacing only: otherwise they are ``records`` itself)."""
        if not self.namespacing:
            return
        keys: dict[str, list[str]] = {}
        for key, source in self._snapshot.models.items():
            keys.setdefault(source.name, []).append(key)
        for key, record in self.records.items():
            found = keys.setdefault(record.name, [])
            if key not in found:
                found.append(key)
        by_name = {name: self.records[k[0]] for name, k in keys.items() if len(k) == 1 and k[0] in self.records}
        self._keys, self.ambiguous = keys, {name: len(k) for name, k in keys.items() if len(k) > 1}
        self.by_name = by_name

    # -- reading ----------------------------------------------------------------------------------

    def resolve(self, name: str, version: str = "") -> ModelVersion:
        """The version serving ``name`` (the highest ready one when ``version`` is empty)."""
        record = self.by_name.get(name)
        if record is not None and not version and record.serving:  # the common case, inline
            serving = record.serving
            return serving[max(serving)]
        if record is None:
            if name in self.ambiguous:
                raise ambiguous_name(name, self.ambiguous[name])
            if self.load_advice and self._snapshot.keys_of(name):
                advice = self.load_advice.format(name=name)
                raise NotFound(
                    f"Request for unknown model: '{name}' is not found; it is in the repository but not loaded: {advice}"
                )
            raise unknown_model(name, candidates=visible_names(self.names()))
        return _version(record, name, version, self.load_advice)

    def routed(self, name: str, request_id: str = "") -> ModelVersion:
        """The version a request for ``name`` that names no version runs on: the one its traffic
        split picks (:mod:`inferd.engine.traffic`), else the highest ready one."""
        split = self.traffic.splits.get(name)
        record = self.by_name.get(name) if split is not None else None
        if split is not None and record is not None:
            mv = record.serving.get(split.pick(request_id))
            if mv is not None:
                return mv
        return self.resolve(name)

    def resolve_key(self, key: str, version: str = "") -> ModelVersion:
        """:meth:`resolve` for a model key (an ensemble's step, resolved when it loaded)."""
        record = self.records.get(key)
        if record is not None and not version and record.serving:  # the common case, inline
            serving = record.serving
            return serving[max(serving)]
        return _version(record, key, version, self.load_advice)

    def step_key(self, namespace: str, name: str) -> str:
        """The key of the model an ensemble of ``namespace`` calls by ``name``, as Triton resolves it:
        the one in the ensemble's own repository, else the only one by that name. A name found
        in neither gives the own key (which resolves to nothing); one found in several other
        repositories is refused."""
        own = model_key(namespace, name)
        if not self.namespacing or own in self.records or own in self._snapshot.models:
            return own
        keys = self._keys.get(name, [])
        if len(keys) > 1:
            raise InvalidArgument(
                f"model '{name}' is in {len(keys)} other model repositories and not in the ensemble's own "
                "(model namespace must be provided to resolve ambiguity)"
            )
        return keys[0] if keys else own

    def keys_of(self, name: str) -> list[str]:
        """The keys of the models named ``name``, among the records and the last scan."""
        if not self.namespacing:
            return [name] if name in self.records or name in self._snapshot.models else []
        return list(self._keys.get(name, ()))

    def ready_versions(self, name: str) -> list[int]:
        record = self.by_name.get(name)
        return sorted(record.serving) if record else []

    def serving(self, name: str = "") -> Iterator[ModelVersion]:
        """Every serving version (of ``name`` only, when given), by repository, name, then version."""
        if name:
            record = self.by_name.get(name)
            records = [record] if record is not None else []
        else:
            records = sorted(self.records.values(), key=lambda r: (r.namespace, r.name))
        for record in records:
            yield from (mv for _, mv in sorted(record.serving.items()))

    def names(self) -> list[str]:
        """Every model name in the repositories or with a record, sorted (names, not keys: with
        namespacing a name in two repositories is listed once)."""
        return sorted({r.name for r in self.records.values()} | {s.name for s in self._snapshot.models.values()})

    def known(self, name: str) -> bool:
        """Whether ``name`` is in the repositories or has a record (loaded, failed, unloaded), and
        names one model."""
        return name in self.by_name or (name not in self.ambiguous and bool(self._snapshot.keys_of(name)))

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: every model in the repositories and every known version,
        by repository (with namespacing) then name; a name in several repositories has rows in each."""
        snapshot = self._snapshot
        keys = {k: (s.namespace, s.name) for k, s in snapshot.models.items()}
        keys.update((k, (r.namespace, r.name)) for k, r in self.records.items())
        rows: list[dict[str, str]] = []
        for key, (_, name) in sorted(keys.items(), key=lambda item: item[1]):
            record = self.records.get(key)
            found = record.index_rows() if record is not None else [{"name": name}]
            if key in snapshot.stale:  # serving from the cached copy of an unreadable store
                found = [{**row, "reason": row.get("reason") or snapshot.stale[key]} for row in found]
            rows.extend(found)
        if self.traffic.splits:
            self.traffic.mark_index(rows)
        return [r for r in rows if r.get("state") == State.READY.value] if ready_only else rows


def ambiguous_name(name: str, count: int) -> InvalidArgument:
    """Triton's error for a request naming a model found in ``count`` repositories (namespacing)."""
    return InvalidArgument(
        f"There are {count} identifiers of model '{name}' in global map, model namespace must be provided to "
        "resolve ambiguity."
    )


def _version(record: ModelRecord | None, name: str, version: str, advice: str = "") -> ModelVersion:
    """The version of ``record`` a request for ``name``/``version`` runs on."""
    serving = record.serving if record is not None else None
    if not serving:
        if record is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        raise NotFound(f"Request for unknown model: '{name}' has no available versions; {_not_loaded(record, advice)}")
    if not version:
        return serving[max(serving)]
    try:
        number = int(version)
    except ValueError:
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' (details: stol), "
            f"version should be an integral value > 0; model '{name}'"
        ) from None
    found = serving.get(number)
    if found is None:
        raise NotFound(
            f"Request for unknown model: '{name}' version {version} is not found; "
            f"available versions: {', '.join(str(v) for v in sorted(serving))}"
        )
    return found


def _not_loaded(record: ModelRecord, advice: str) -> str:
    """Why ``record`` serves no version, and what loads it."""
    states = [record.versions[v] for v in sorted(record.versions, reverse=True)]
    if any(state.failed for state in states):
        head = "its load failed (see /v2/repository/index for the reason)"
    elif all(state.why in (Why.NONE, Why.UNLOADED) for state in states):
        head = "it is not loaded"
    else:
        return f"it does not serve: {next(s.reason for s in states if s.why not in (Why.NONE, Why.UNLOADED))}"
    return f"{head}: {advice.format(name=record.name)}" if advice else head
