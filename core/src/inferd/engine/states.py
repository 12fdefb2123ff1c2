"""Model and version states, and the record the lifecycle keeps for each model name.

States follow Triton: UNAVAILABLE, LOADING, READY, UNLOADING. Each state also says *why* as an
enum (a load failed, a reload failed, unloaded, removed...); the reason texts clients read in the
repository index and in load errors are derived from it, never parsed back.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferd.engine.version import ModelVersion


class State(str, enum.Enum):
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    #: Unloaded to stay under the memory budget (``--model-memory-budget``): its next request loads it.
    EVICTED = "EVICTED"


class Why(enum.Enum):
    """Why a version is in its state. Each value is the reason text shown in the repository
    index and in load errors, ``{}`` standing for the state's detail."""

    NONE = ""
    LOAD_FAILED = "{}"
    RELOAD_FAILED = "reload failed, previous version still serving: {}"
    UNLOADED = "unloaded"
    EVICTED = "evicted to stay under the memory budget (idle, least recently used); its next request loads it"
    REMOVED = "removed from the repository"
    DEPENDENCY = "unloaded: it calls '{}', which was unloaded"
    #: An ensemble taken out of serving: a model its steps call was reloaded with inputs or
    #: outputs it no longer fits (the detail names the step and the tensor).
    STEPS_CHANGED = "a model its steps call changed and it no longer fits: {}"
    #: Loaded, but its backend says it cannot serve now (``Model.not_serving``).
    NOT_SERVING = "{}"  # noqa: PIE796 - LOAD_FAILED's text, so its alias: ``failed`` is true of it


@dataclass(frozen=True)
class VersionState:
    """A version's (or a whole model's) state, why it is in it, and the detail of the why."""

    state: State
    why: Why = Why.NONE
    detail: str = ""

    @property
    def reason(self) -> str:
        return self.why.value.format(self.detail)

    @property
    def failed(self) -> bool:
        """A load failed: a version never loaded, or its reload did while the old one serves."""
        return self.why in (Why.LOAD_FAILED, Why.RELOAD_FAILED)

    def index_row(self, name: str, version: str) -> dict[str, str]:
        """One repository-index row; like Triton, empty version and reason are left out."""
        row = {"name": name}
        if version:
            row["version"] = version
        row["state"] = self.state.value
        if self.reason:
            row["reason"] = self.reason
        return row


LOADING = VersionState(State.LOADING)
READY = VersionState(State.READY)
UNLOADING = VersionState(State.UNLOADING)
UNLOADED = VersionState(State.UNAVAILABLE, Why.UNLOADED)
EVICTED = VersionState(State.EVICTED, Why.EVICTED)


@dataclass
class ModelRecord:
    """Everything the server knows of one model (one name, or with ``--model-namespacing`` one
    name in one repository)."""

    name: str
    #: The repository it was found in, with ``--model-namespacing`` ("" otherwise).
    namespace: str = ""
    serving: dict[int, ModelVersion] = field(default_factory=dict)
    versions: dict[int, VersionState] = field(default_factory=dict)
    #: A failure that concerns the whole model (bad config, no backend), shown with no version.
    state: VersionState | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def current(self, version: int, state: VersionState) -> VersionState:
        """``state`` of ``version``, or UNAVAILABLE while its loaded backend model says it cannot serve."""
        mv = self.serving.get(version) if state.state is State.READY else None
        problem = mv.model.not_serving() if mv is not None and mv.model is not None else None
        return state if problem is None else VersionState(State.UNAVAILABLE, Why.NOT_SERVING, problem)

    def index_rows(self) -> list[dict[str, str]]:
        """The model's rows in Triton's repository index: one per known version."""
        rows = [self.current(v, st).index_row(self.name, str(v)) for v, st in sorted(self.versions.items())]
        if not rows and self.state is not None:
            rows.append(self.state.index_row(self.name, ""))
        return rows or [{"name": self.name}]

    def load_error(self) -> str:
        """What a load request reports as failed ("" when nothing did): every version's reason
        when none serves, else the versions whose (re)load failed."""
        if self.serving:
            return "; ".join(f"version {v}: {s.reason}" for v, s in sorted(self.versions.items()) if s.failed)
        shown = "; ".join(f"version {v}: {s.reason}" for v, s in sorted(self.versions.items()) if s.reason)
        return shown or (self.state.reason if self.state else "no version could be loaded")

    def load_failure(self) -> str:
        """What a failed load request answers, as Triton words it: ``load failed for model '<m>':
        version <n> is at UNAVAILABLE state: <reason>`` for each failed version (the model's own
        reason when no version got that far); with ``--model-namespacing`` the model is
        ``<repository>::<m>``, as in Triton."""
        name = f"{self.namespace}::{self.name}" if self.namespace else self.name
        failed = (
            [(v, s) for v, s in sorted(self.versions.items()) if s.failed]
            if self.serving
            else [(v, s) for v, s in sorted(self.versions.items()) if s.reason]
        )
        shown = "; ".join(f"version {v} is at UNAVAILABLE state: {s.reason}" for v, s in failed)
        if not shown:
            shown = self.state.reason if self.state and self.state.reason else "no version could be loaded"
        return f"load failed for model '{name}': {shown}"

    def fail(self, message: str, version_dirs: list[int], version: int | None = None) -> None:
        """A failure before any version was built, of ``version``'s files when it is known. The
        serving versions keep serving: a new version's failure is shown on it, any other on the
        serving versions (their reload failed). With none serving: on ``version``, else on the
        version the default policy would load, else on the model."""
        failed = VersionState(State.UNAVAILABLE, Why.LOAD_FAILED, message)
        if self.serving:
            if version is None or version in self.serving:
                kept = VersionState(State.READY, Why.RELOAD_FAILED, message)
                self.versions.update(dict.fromkeys(self.serving, kept))
            else:
                self.versions[version] = failed
            return
        shown = [version] if version is not None else version_dirs
        self.versions = {max(shown): failed} if shown else {}
        self.state = None if shown else failed

    def drop_failed(self, wanted: Iterable[int]) -> None:
        """Forget the failures of versions no longer ``wanted`` and not serving (their files were
        removed, or the version policy moved on): their rows leave the repository index."""
        keep = set(wanted) | set(self.serving)
        for v, state in list(self.versions.items()):
            if v not in keep and state.failed:
                del self.versions[v]
