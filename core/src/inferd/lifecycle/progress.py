"""A line every few seconds while a model version loads (``loading: llm:1 … 10 s``), so a slow
load (a vLLM engine starting, a large model read) is not silence. One timer on the event loop per
load, rescheduled at each line: no thread, and nothing at all for a load quicker than the first."""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType

log = logging.getLogger(__name__)

#: Seconds between the lines (the first comes after this long).
EVERY_S = 5.0


class LoadProgress:
    """``with LoadProgress("llm:1"):`` around a load that runs on the loop's thread pool or awaits."""

    def __init__(self, what: str, every: float = EVERY_S) -> None:
        self.what = what
        self.every = every
        self.started = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def __enter__(self) -> LoadProgress:
        self.started = time.monotonic()
        self._handle = asyncio.get_running_loop().call_later(self.every, self._tick)
        return self

    def _tick(self) -> None:
        log.info("loading: %s … %.0f s", self.what, time.monotonic() - self.started)
        self._handle = asyncio.get_running_loop().call_later(self.every, self._tick)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
