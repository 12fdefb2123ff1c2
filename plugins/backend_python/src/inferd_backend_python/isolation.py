"""What a Python backend's isolated models share: the thread that starts their stubs, the threads
that run their BLS calls, the memory watchdog and the stubs' ``/metrics`` families.

The backend makes one :class:`Isolation`; each isolated model holds it while loaded (and an
``auto_complete_config`` stub while it runs). Its threads start on first use and stop when the
last holder lets go (the watchdog's once no stub is left); the statistics are on ``/metrics``
meanwhile and keep their counts for the backend's life.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from inferd.api import SOURCES
from inferd_backend_python.stub_stats import Stats
from inferd_backend_python.watchdog import Watchdog

_T = TypeVar("_T")


class Threads:
    """A pool of ``count`` threads, made on first use (again in a forked child, and after :meth:`shutdown`)."""

    def __init__(self, count: int, prefix: str) -> None:
        self._count = count
        self._prefix = prefix
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """Run ``fn(*args, **kwargs)`` on one of the threads."""
        with self._lock:
            if self._pool is None or self._pool[0] != os.getpid():  # a forked worker makes its own
                self._pool = (os.getpid(), ThreadPoolExecutor(self._count, thread_name_prefix=self._prefix))
            pool = self._pool[1]
        return pool.submit(fn, *args, **kwargs)

    def shutdown(self) -> None:
        """Let the threads end once idle."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and pool[0] == os.getpid():
            pool[1].shutdown(wait=False)


class Isolation:
    """The threads and statistics of a backend's isolated models (see the module's docstring)."""

    def __init__(self) -> None:
        #: The one thread that starts stubs: a stub dies with the thread that started it
        #: (:mod:`~inferd_backend_python.launcher`), so it lives while any model may have stubs.
        self.spawner = Threads(1, "inferd-python-spawner")
        #: The threads that run the stubs' BLS calls through the server.
        self.bls = Threads(64, "inferd-python-bls")
        self.watchdog = Watchdog()
        self.stats = Stats()
        self._holders = 0
        self._lock = threading.Lock()

    def hold(self) -> None:
        """A model (or an ``auto_complete_config`` run) starts using it."""
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                SOURCES.add(self.stats)

    def release(self) -> None:
        """A holder is done: the last one stops the threads and takes the statistics off ``/metrics``
        (its stubs have ended)."""
        with self._lock:
            self._holders -= 1
            if self._holders:
                return
            SOURCES.remove(self.stats)
            self.bls.shutdown()
            self.spawner.shutdown()
