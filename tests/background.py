"""Requests sent from a thread while a test does something else to the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Background:
    """Calls ``ask(i)`` for i = 0, 1, 2... on a thread while in its ``with`` block, ``pause``
    seconds apart: ``ok`` counts the calls that returned, ``failures`` says how each other one
    failed (``ask`` raises for a wrong answer)."""

    def __init__(self, ask: Callable[[int], object], pause: float = 0.0) -> None:
        self.ask = ask
        self.pause = pause
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.ask(i)
                self.ok += 1
            except Exception as exc:  # every failure is what the test looks at
                self.failures.append(f"{type(exc).__name__}: {exc}")
            i += 1
            time.sleep(self.pause)

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
