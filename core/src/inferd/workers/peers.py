"""A worker's view of the other workers of its server."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.contracts.errors import InferdError
from inferd.workers.control import acall

log = logging.getLogger(__name__)

#: How long a question that needs no model work may take before the peer counts as absent.
QUICK_S = 2.0


@dataclass(frozen=True)
class WorkerSlot:
    """Which worker this process is: ``index`` of ``count``, control sockets in ``directory``."""

    index: int
    count: int
    directory: Path

    def socket(self, index: int) -> Path:
        """The control socket of worker ``index``."""
        return self.directory / f"worker-{index}.sock"


class Peers:
    """Asks every other worker; a worker that is not there (restarting) is left out."""

    def __init__(self, slot: WorkerSlot) -> None:
        self.slot = slot
        self.paths = [slot.socket(i) for i in range(slot.count) if i != slot.index]

    async def ask_each(self, op: str, args: dict[str, Any] | None = None) -> list[Any]:
        """Each peer's answer to a quick question, all asked at once without blocking the event loop:
        a peer not there or silent for :data:`QUICK_S` (stopped, wedged) is left out; a peer's
        :class:`InferdError` is raised here."""
        results = await asyncio.gather(*(acall(p, op, args, QUICK_S) for p in self.paths), return_exceptions=True)
        answers = []
        for path, result in zip(self.paths, results, strict=True):
            if isinstance(result, OSError):
                log.debug("worker at %s did not answer %s: %s", path, op, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                answers.append(result)
        return answers

    async def ask_all(self, op: str, args: dict[str, Any], timeout: float | None = None) -> list[BaseException | None]:
        """Ask every peer at once and wait for all; per peer, the error it raised (``None``: done
        or not there)."""

        async def one(path: Path) -> None:
            try:
                await acall(path, op, args, timeout)
            except OSError as exc:
                log.warning("worker at %s did not take %s: %s", path, op, exc)

        results = await asyncio.gather(*(one(p) for p in self.paths), return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results]

    async def all_ready(self) -> bool:
        """Every other worker is up and ready (asked at once; silent for :data:`QUICK_S`: not ready)."""
        results = await asyncio.gather(*(acall(p, "ready", None, QUICK_S) for p in self.paths), return_exceptions=True)
        for path, result in zip(self.paths, results, strict=True):
            if isinstance(result, InferdError):
                log.warning("worker at %s failed its readiness check: %s", path, result.message)
        return all(r is True for r in results)
