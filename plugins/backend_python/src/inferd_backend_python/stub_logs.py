"""How much an isolated model may write to the server's log.

The records a stub forwards (``pb_utils.Logger``, ``logging``) are logged by the server, so a model
that logs in a loop could fill its disk. Each record is cut to :data:`LINE_CHARS` characters (the
rest replaced by ``… [truncated N characters]``), and each model version has a token bucket of
characters, shared by its instances: a record costs its characters plus :data:`RECORD_COST`, the
bucket holds :data:`BURST_CHARS` and refills at :data:`RATE_CHARS` a second. A record the bucket
cannot pay for is dropped and counted; a summary line says how many, at most once every
:data:`SUMMARY_S` seconds. ``/metrics`` counts both (``inferd_python_stub_log_lines_dropped_total``,
``inferd_python_stub_log_lines_truncated_total``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from inferd_backend_python.shm import Malformed

#: Characters of one record the server logs; the rest is cut.
LINE_CHARS = 16 * 1024
#: The bucket: what a model version may log at once, and a second from then on (characters).
BURST_CHARS = 1 << 20
RATE_CHARS = 256 * 1024
#: What a record costs beyond its text: the line's prefix, and a bound on short records too
#: (2048 at once, then 512 a second).
RECORD_COST = 512
#: How often at most the dropped records are reported.
SUMMARY_S = 1.0
#: Logger names one model version may use; past them a record goes to ``inferd.python``, its
#: name in front (a model inventing a logger per record would grow the server's logger table).
MAX_NAMES = 256

_log = logging.getLogger("inferd.contracts.backend.python")


class LogBudget:
    """One model version's log budget (not thread-safe: used from the event loop, or from the one
    thread of a short-lived ``auto_complete_config`` stub)."""

    def __init__(self, model: str, version: str, counted: Callable[[str, int], None] | None = None) -> None:
        self.model = model
        self.version = version
        self._counted = counted
        self._tokens = float(BURST_CHARS)
        self._stamp = time.monotonic()
        self._names: set[str] = set()
        #: Records dropped since the last summary.
        self.dropped = 0

    def log(self, level: int, name: str, message: str) -> bool:
        """Log one record of the model within the budget; False when it was dropped (then call
        :meth:`report` within :data:`SUMMARY_S` if :attr:`dropped` was 0 before)."""
        cut = len(message) - LINE_CHARS
        cost = min(len(message), LINE_CHARS) + RECORD_COST
        now = time.monotonic()
        self._tokens = min(float(BURST_CHARS), self._tokens + (now - self._stamp) * RATE_CHARS)
        self._stamp = now
        if self._tokens < cost:
            self.dropped += 1
            if self._counted is not None:
                self._counted("dropped", 1)
            return False
        self._tokens -= cost
        if cut > 0:
            message = f"{message[:LINE_CHARS]}… [truncated {cut} characters]"
            if self._counted is not None:
                self._counted("truncated", 1)
        if name not in self._names:
            if len(self._names) >= MAX_NAMES:
                name, message = "inferd.python", f"[{name[:200]}] {message}"
            else:
                self._names.add(name)
        logging.getLogger(name).log(level, "%s", message)
        return True

    def report(self) -> None:
        """Log how many records were dropped since the last report (if any)."""
        if self.dropped:
            _log.warning(
                "dropped %d log lines from model '%s' version %s: more than its stubs' log budget (%d KiB at once, "
                "then %d KiB a second, each line counting %d characters more than its text)",
                self.dropped,
                self.model,
                self.version,
                BURST_CHARS >> 10,
                RATE_CHARS >> 10,
                RECORD_COST,
            )
            self.dropped = 0


def log_record(body: Any) -> tuple[int, str, str]:
    """A LOG message's (level, logger name, text), checked (:class:`~inferd_backend_python.shm.Malformed`)."""
    if not (isinstance(body, tuple | list) and len(body) == 3):
        raise Malformed("a log record that is not (level, logger name, text)")
    level, name, message = body
    if type(level) is not int or type(name) is not str or type(message) is not str:
        raise Malformed("a log record that is not (level, logger name, text)")
    return level, name, message
