"""What the server serves right now: every model's record, and the last repository scan.

The lifecycle writes it (loads, swaps, unloads); the data plane, the router that runs requests
and the metrics frontend read it. It holds no behaviour beyond lookups, so every reader can be
built before the lifecycle and nothing needs a back-reference to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from inferd.auth.policy import unknown_model, visible_names
from inferd.errors import InvalidArgument, NotFound
from inferd.repository import Snapshot
from inferd.states import ModelRecord, State

if TYPE_CHECKING:
    from inferd.model import ModelVersion


class ModelTable:
    """Model records by name, and the repository snapshot they were loaded from."""

    def __init__(self) -> None:
        self.records: dict[str, ModelRecord] = {}
        self.snapshot = Snapshot()
        #: Models that appeared under poll after start-up (the lifecycle writes it): with
        #: ``--strict-readiness`` their failures leave the server ready (see :mod:`inferd.health`).
        self.poll_added: set[str] = set()

    def resolve(self, name: str, version: str = "") -> ModelVersion:
        """The version serving ``name`` (the highest ready one when ``version`` is empty)."""
        record = self.records.get(name)
        serving = record.serving if record is not None else None
        if not serving:
            if record is None:
                raise unknown_model(name, candidates=visible_names(self.names()))
            raise NotFound(f"Request for unknown model: '{name}' has no available versions")
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

    def ready_versions(self, name: str) -> list[int]:
        record = self.records.get(name)
        return sorted(record.serving) if record else []

    def serving(self, name: str = "") -> Iterator[ModelVersion]:
        """Every serving version (of ``name`` only, when given), by name then version."""
        names = [name] if name else sorted(self.records)
        for n in names:
            record = self.records.get(n)
            if record is not None:
                yield from (mv for _, mv in sorted(record.serving.items()))

    def names(self) -> list[str]:
        """Every model name in the repositories or with a record, sorted."""
        return sorted(set(self.records) | set(self.snapshot.models))

    def known(self, name: str) -> bool:
        """Whether ``name`` is in the repositories or has a record (loaded, failed, unloaded)."""
        return name in self.records or name in self.snapshot.models

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: every model in the repositories and every known version."""
        rows: list[dict[str, str]] = []
        for name in sorted(set(self.snapshot.models) | set(self.records)):
            record = self.records.get(name)
            found = record.index_rows() if record is not None else [{"name": name}]
            if name in self.snapshot.stale:  # serving from the cached copy of an unreadable store
                found = [{**row, "reason": row.get("reason") or self.snapshot.stale[name]} for row in found]
            rows.extend(found)
        return [r for r in rows if r.get("state") == State.READY.value] if ready_only else rows
