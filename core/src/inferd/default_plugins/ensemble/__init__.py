"""The ensemble scheduler (``platform: "ensemble"``), registered like any scheduler plugin."""

from __future__ import annotations

from inferd.default_plugins.ensemble.scheduler import EnsembleScheduler
from inferd.hookspecs import SchedulerRegister, hookimpl

__all__ = ["EnsembleScheduler"]


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("ensemble", EnsembleScheduler)
