"""The ensemble scheduler (``platform: "ensemble"``), registered like any scheduler plugin."""

from __future__ import annotations

from inferd.contracts.hookspecs import SchedulerRegister, hookimpl
from inferd.schedulers.ensemble.scheduler import EnsembleScheduler

__all__ = ["EnsembleScheduler"]


@hookimpl
def inferd_register_schedulers(register: SchedulerRegister) -> None:
    register("ensemble", EnsembleScheduler)
