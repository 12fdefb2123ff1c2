"""Waiting in tests for something a server does in its own time: poll until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable

#: How long a wait lasts by default: long enough for a loaded two-core machine running several
#: servers at once; a condition that holds ends the wait at once, so only a failing test waits it out.
TIMEOUT_S = 90.0


def wait_for(
    condition: Callable[[], object],
    what: str = "the condition",
    timeout: float = TIMEOUT_S,
    *,
    log: Callable[[], str] | None = None,
    interval: float = 0.05,
) -> None:
    """Call ``condition`` every ``interval`` seconds until it returns something true; after
    ``timeout`` seconds fail the test with ``timed out waiting for <what>`` and, when given, the
    end of ``log()`` (a server's log: ``log=server.log``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tail = f"\n{log()[-6000:]}" if log is not None else ""
            raise AssertionError(f"timed out waiting for {what} ({timeout:g} s){tail}")
        time.sleep(interval)
