"""Load generators: N requests kept in flight (concurrency) or a fixed schedule (request rate).

Callback-driven: a request's completion records it and starts the next one of its chain, on
the event loop (HTTP) or a gRPC thread, with no coroutine or thread per in-flight request. Each
completed request appends ``(end_ns, request_ns, latency_ns, send_ns, recv_ns, responses)``;
``latency_ns`` is the time to the first response for decoupled streams (as perf_analyzer
measures them), else ``request_ns``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from inferd.tools import ToolError
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.transport import RequestError, SequenceFlags, Transport

Record = tuple[int, int, int, int, int, int]
DRAIN_TIMEOUT_S = 120.0


class Recorder:
    """Completed requests since the last :meth:`swap`, and totals over the whole run. Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[Record] = []
        self.completed = 0
        self.responses = 0
        self.failed = 0
        self.inflight = 0
        self.delayed = 0
        self.error: RequestError | None = None

    def swap(self) -> list[Record]:
        """The records gathered since the last call; starts a new list."""
        with self.lock:
            out, self.records = self.records, []
        return out


class Feed:
    """The encoded entries requests cycle through; for sequence models, sequence ids and lengths."""

    def __init__(self, streams: list[list[Any]], opts: PerfOptions, sequence: bool) -> None:
        self.streams = streams
        self.flat = [e for s in streams for e in s]
        self.sequence = sequence
        self._counter = itertools.count()
        self._ids = itertools.count(opts.sequence_id_start)
        self._base_length = opts.sequence_length
        self._variation = opts.sequence_length_variation / 100.0
        self._rng = random.Random(0)
        self._lock = threading.Lock()

    def next(self) -> Any:
        return self.flat[next(self._counter) % len(self.flat)]

    def new_sequence(self) -> tuple[int, list[Any], int]:
        """A fresh sequence: its id, its data stream and its length."""
        with self._lock:
            seq_id = next(self._ids)
            stream = self.streams[seq_id % len(self.streams)]
            if self._base_length is None and len(stream) > 1:
                return seq_id, stream, len(stream)
            base = self._base_length or 20
            return seq_id, stream, max(1, round(base * (1 + self._rng.uniform(-self._variation, self._variation))))


class SequenceCursor:
    """Walks one sequence after another: start flag on the first request, end flag on the last.

    ``busy`` / ``backlog`` keep one request in flight per sequence in request-rate mode.
    """

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.lock = threading.Lock()
        self.busy = False
        self.backlog = 0
        self._id, self._length, self._pos = 0, 0, 0
        self._stream: list[Any] = []

    @property
    def open(self) -> bool:
        return 0 < self._pos < self._length

    def next(self, force_end: bool = False) -> tuple[Any, SequenceFlags]:
        if self._pos >= self._length:
            self._id, self._stream, self._length = self.feed.new_sequence()
            self._pos = 0
        entry = self._stream[self._pos % len(self._stream)]
        start, end = self._pos == 0, force_end or self._pos == self._length - 1
        self._pos = self._length if end else self._pos + 1
        return entry, (self._id, start, end)


class Load:
    """Issues requests and records them; subclasses decide when the next one starts."""

    def __init__(self, transport: Transport, feed: Feed, recorder: Recorder, decoupled: bool) -> None:
        self.transport = transport
        self.feed = feed
        self.recorder = recorder
        self.decoupled = decoupled
        self.running = False

    def issue(self, entry: Any, flags: SequenceFlags, then: Callable[[], None] | None) -> None:
        """Send one request; on success call ``then`` (which may issue the next one)."""
        rec = self.recorder
        with rec.lock:
            rec.inflight += 1
        t0 = time.perf_counter_ns()

        def done(send_ns: int, recv_ns: int, responses: int, first_at: int, error: RequestError | None) -> None:
            t1 = time.perf_counter_ns()
            if error is None:
                latency = first_at - t0 if self.decoupled and first_at else t1 - t0
                with rec.lock:
                    rec.records.append((t1, t1 - t0, latency, send_ns, recv_ns, responses))
                    rec.completed += 1
                    rec.responses += responses
                if then is not None:
                    then()
            else:
                self.running = False  # errors are fatal, as in perf_analyzer
                with rec.lock:
                    rec.failed += 1
                    rec.error = rec.error or error
            with rec.lock:
                rec.inflight -= 1

        try:
            self.transport.send(entry, flags, done)
        except Exception as exc:  # a transport that fails before sending
            done(0, 0, 0, 0, RequestError(f"sending a request failed: {exc}"))

    def close_sequence(self, cursor: SequenceCursor) -> None:
        """End a sequence left open when the load stops, so the server frees its slot."""
        with cursor.lock:
            if not cursor.open or self.recorder.error is not None:
                return
            entry, flags = cursor.next(force_end=True)
        self.issue(entry, flags, None)

    async def stop(self) -> None:
        """Stop issuing and wait until no request is in flight."""
        self.running = False
        await self._stopped()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.recorder.inflight > 0:
            if time.monotonic() > deadline:
                raise ToolError(
                    f"{self.recorder.inflight} requests still in flight {DRAIN_TIMEOUT_S:g} s after stopping"
                )
            await asyncio.sleep(0.002)

    async def _stopped(self) -> None:
        """Subclass hook: wait for the generator itself to stop."""


class ConcurrencyLoad(Load):
    """``n`` chains: each request's completion starts the next one of its chain."""

    def start(self, n: int) -> None:
        self.running = True
        for _ in range(n):
            self._step(SequenceCursor(self.feed) if self.feed.sequence else None)

    def _step(self, cursor: SequenceCursor | None) -> None:
        if cursor is None:
            if self.running:
                self.issue(self.feed.next(), None, lambda: self._step(None))
        elif self.running:
            entry, flags = cursor.next()
            self.issue(entry, flags, lambda: self._step(cursor))
        else:
            self.close_sequence(cursor)


class RateLoad(Load):
    """Requests started on a schedule (constant or Poisson gaps), however many are in flight;
    sequences keep one request in flight each (later ones wait their turn)."""

    def start(self, rate: float, distribution: str, num_sequences: int) -> None:
        self.running = True
        cursors = [SequenceCursor(self.feed) for _ in range(max(1, num_sequences))] if self.feed.sequence else []
        self._cursors = cursors
        self._task = asyncio.ensure_future(self._dispatch(rate, distribution, cursors))

    async def _dispatch(self, rate: float, distribution: str, cursors: list[SequenceCursor]) -> None:
        rng = random.Random(0)
        gap = 1.0 / rate
        loop = asyncio.get_running_loop()
        due = loop.time()
        for slot in itertools.count():
            due += rng.expovariate(rate) if distribution == "poisson" else gap
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -gap:
                self.recorder.delayed += 1
            if not self.running:
                return
            if cursors:
                self._sequence_request(cursors[slot % len(cursors)])
            else:
                self.issue(self.feed.next(), None, None)

    def _sequence_request(self, cursor: SequenceCursor) -> None:
        with cursor.lock:
            if cursor.busy:
                cursor.backlog += 1
                return
            cursor.busy = True
        entry, flags = cursor.next()
        self.issue(entry, flags, lambda: self._sequence_done(cursor))

    def _sequence_done(self, cursor: SequenceCursor) -> None:
        with cursor.lock:
            more = self.running and cursor.backlog > 0
            if more:
                cursor.backlog -= 1
            else:
                cursor.busy = False
        if more:
            entry, flags = cursor.next()
            self.issue(entry, flags, lambda: self._sequence_done(cursor))
        elif not self.running:
            self.close_sequence(cursor)

    async def _stopped(self) -> None:
        await self._task
        for cursor in self._cursors:
            with cursor.lock:
                idle = not cursor.busy
            if idle:
                self.close_sequence(cursor)
