"""The memory watchdog of a backend's stub processes: one thread reads their resident memory and
kills those over their model's ``MEMORY_LIMIT``, while any stub runs."""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

_MiB = 1024 * 1024


class Watched(Protocol):
    """A running stub, as the watchdog sees it."""

    @property
    def pid(self) -> int: ...
    @property
    def memory_limit(self) -> int | None: ...

    rss: int

    def kill(self, reason: str | None, kind: str | None, grace: float = 0.0) -> None: ...


class Watchdog:
    """One thread for every stub of a backend: reads their RSS, kills those over their limit. It
    runs while there are stubs to watch: the first one added starts it, it ends once none is left."""

    def __init__(self) -> None:
        self._stubs: dict[int, Watched] = {}
        self._lock = threading.Lock()
        self._running = False
        self._page = os.sysconf("SC_PAGE_SIZE")

    def add(self, stub: Watched) -> None:
        with self._lock:
            self._stubs[id(stub)] = stub
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="inferd-python-watchdog", daemon=True).start()

    def remove(self, stub: Watched) -> None:
        with self._lock:
            self._stubs.pop(id(stub), None)

    def _run(self) -> None:
        while True:
            with self._lock:
                stubs = list(self._stubs.values())
                if not stubs:
                    self._running = False
                    return
            limited = False
            for stub in stubs:
                limit = stub.memory_limit
                limited = limited or limit is not None
                try:
                    with open(f"/proc/{stub.pid}/statm", "rb") as f:
                        stub.rss = int(f.read().split()[1]) * self._page
                except (OSError, ValueError, IndexError):
                    continue
                if limit is not None and stub.rss > limit:
                    stub.kill(
                        f"exceeded its memory limit: RSS {stub.rss / _MiB:.0f} MiB > MEMORY_LIMIT {limit / _MiB:.0f} MiB",
                        "memory",
                    )
            time.sleep(0.2 if limited else 1.0)
