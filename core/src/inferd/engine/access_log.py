"""``--access-log FILE|-``: one line per inference request a frontend answered (docs/traffic.md,
"Access log"), written by a thread of its own.

The frontends call :meth:`RequestLog.begin` on a decoded request (it keeps the request's queue and
compute marks, as a request asking ``"timing": true`` does) and :meth:`RequestLog.entry` once it
is answered; ``entry`` reads the tenant and the marks and appends a tuple to a bounded queue (a
full one drops the line and counts it). The writer thread formats and writes what is queued every
50 ms, never on the event loop. Without the flag the data plane's ``access_log`` is None: a
frontend's one check per request.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import deque
from typing import IO, TYPE_CHECKING

from inferd.auth.policy import CURRENT
from inferd.contracts.trace import TRACE_KEY
from inferd.engine.router import RequestTiming

if TYPE_CHECKING:
    from inferd.contracts.types import InferRequest

log = logging.getLogger(__name__)

#: Lines waiting for the writer at most; beyond, dropped (and counted).
QUEUE_LINES = 100_000
#: How often the writer thread writes what is queued (seconds).
WRITE_EVERY = 0.05
#: One line's fields, in order: (unix time, tenant, model, version, protocol, status, queue µs,
#: compute µs, bytes in, bytes out).
Line = tuple[float, str, str, str, str, str, int, int, int, int]


def format_line(line: Line) -> str:
    """``2026-12-06T02:30:00.123456Z tenant=alice model=m version=1 protocol=grpc status=OK
    queue_us=41 compute_us=902 bytes_in=120 bytes_out=96`` (``-`` for what is not known: a
    queue or compute time of -1 when the request never reached an instance; a name with a
    space, ``=`` or ``"`` in JSON quotes)."""
    t, tenant, model, version, protocol, status, queue_us, compute_us, bytes_in, bytes_out = line
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"
    return (
        f"{stamp} tenant={_text(tenant)} model={_text(model)} version={_text(version)} protocol={protocol} "
        f"status={status} queue_us={_us(queue_us)} compute_us={_us(compute_us)} "
        f"bytes_in={bytes_in} bytes_out={bytes_out}\n"
    )


def _text(value: str) -> str:
    """A name as a field's value: ``-`` when empty, JSON-quoted when it has a space, ``=`` or ``"``
    (a tenant is named in a YAML file: any text), so that every line splits on spaces."""
    if not value:
        return "-"
    return json.dumps(value) if any(c in value for c in ' ="\n\t') else value


def _us(value: int) -> str:
    return "-" if value < 0 else str(value)


class RequestLog:
    """The access log: :meth:`entry` on the event loop, the writing on a thread."""

    def __init__(self, target: str) -> None:
        """``target``: a file to append to, or ``-`` for standard output."""
        self.target = target
        # unbuffered: each batch of whole lines is one write (O_APPEND), so workers sharing the
        # file never split each other's lines
        self._out: IO[bytes] = sys.stdout.buffer if target == "-" else open(target, "ab", buffering=0)  # noqa: SIM115
        #: Lines waiting for the writer (deque appends and pops are atomic: no lock on the loop).
        self._lines: deque[Line] = deque()
        self._stop = threading.Event()
        #: Lines dropped because the writer fell behind.
        self.dropped = 0
        self._thread = threading.Thread(target=self._write, name="inferd-access-log", daemon=True)
        self._thread.start()

    def begin(self, request: InferRequest) -> None:
        request.context.setdefault(TRACE_KEY, RequestTiming(request.arrival_ns))

    def entry(
        self,
        protocol: str,
        request: InferRequest | None,
        model: str,
        version: str,
        status: str,
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        grant = CURRENT.get()
        tenant = grant.tenant.name if grant is not None and grant.tenant is not None else "-"
        queue_us = compute_us = -1
        if request is not None:
            timing = request.context.get(TRACE_KEY)
            if isinstance(timing, RequestTiming) and timing.marks is not None:
                start, _, _, end = timing.marks
                queue_us, compute_us = max(0, start - timing.arrival) // 1000, (end - start) // 1000
        line = (time.time(), tenant, model, version, protocol, status, queue_us, compute_us, bytes_in, bytes_out)
        if len(self._lines) < QUEUE_LINES:
            self._lines.append(line)
        else:
            self.dropped += 1

    def _write(self) -> None:
        """Every :data:`WRITE_EVERY` seconds, what is queued as one write (the thread wakes that
        often rather than per line: fewer switches away from the event loop's thread)."""
        out, lines = self._out, self._lines
        while True:
            stopping = self._stop.wait(WRITE_EVERY)
            parts = []
            while lines:
                parts.append(format_line(lines.popleft()))
            if parts:
                try:
                    out.write("".join(parts).encode())
                    out.flush()
                except (OSError, ValueError):
                    log.exception("--access-log %s: cannot write", self.target)
                    return
            if stopping:
                return

    def close(self) -> None:
        """Write what is queued, then stop the thread (and close the file)."""
        self._stop.set()
        self._thread.join(10)
        if self._out is not sys.stdout.buffer:
            self._out.close()
        if self.dropped:
            log.warning("--access-log: %d lines dropped (the writer fell behind)", self.dropped)
