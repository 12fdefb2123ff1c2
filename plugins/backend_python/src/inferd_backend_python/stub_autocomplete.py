"""An isolated model's ``auto_complete_config``, run in a short-lived stub: the model may import
packages only its environment has."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from inferd.api import InternalError
from inferd_backend_python import ipc, proctree
from inferd_backend_python.isolation import Isolation
from inferd_backend_python.launcher import Launcher, exit_cause
from inferd_backend_python.shm import Malformed
from inferd_backend_python.stub_logs import LogBudget, log_record


def autocomplete(
    launcher: Launcher,
    isolation: Isolation,
    config: dict[str, Any],
    name: str,
    path: Path,
    model_dir: Path,
    version: str,
) -> dict[str, Any] | None:
    """Run ``auto_complete_config`` in a short-lived stub; the completed config (None: no hook)."""
    isolation.hold()
    try:
        proc, channel = launcher.spawn()
    except BaseException:
        isolation.release()
        raise
    label = f"model '{name}'"
    budget = LogBudget(name, version, functools.partial(isolation.stats.logged, name, version))
    try:
        channel.send(ipc.AUTOCOMPLETE, (config, name, str(path), str(model_dir), version))
        while (message := channel.recv()) is not None:
            kind, body, _ = message
            if kind == ipc.READY:
                completed: dict[str, Any] | None = body
                return completed
            if kind == ipc.FAILED:
                raise launcher.failure(body, label)
            if kind == ipc.LOG:
                budget.log(*log_record(body))
        raise InternalError(f"{label}: the stub running auto_complete_config {exit_cause(proc.wait(), None)}")
    except Malformed as exc:
        raise InternalError(f"{label}: the stub running auto_complete_config sent a malformed message: {exc}") from None
    finally:
        proctree.end(proc)  # before the socket closes: the stub would leave, its descendants left behind
        channel.close()
        proc.wait()
        budget.report()
        isolation.release()
