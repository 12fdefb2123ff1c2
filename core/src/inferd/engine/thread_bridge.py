"""Between the event loop and blocking threads: a model stream read from a worker thread (a
Python model calling a decoupled model), and the response sender a decoupled model's thread calls.
Both belong to :class:`~inferd.engine.router.Router`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from inferd.contracts.errors import ErrorKind, InferdError, InternalError
from inferd.contracts.trace import TRACE_KEY
from inferd.contracts.types import InferRequest, InferResponse
from inferd.engine.recorder import FAILED_KEY

if TYPE_CHECKING:
    from inferd.engine.stats import ModelStats


class ThreadStream:
    """The items of an async stream opened on the event loop, handed to a blocking thread."""

    def __init__(
        self, open_stream: Callable[[], AsyncIterator[InferResponse | InferdError]], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._items: queue.SimpleQueue[InferResponse | InferdError | None] = queue.SimpleQueue()  # None: the end
        self._done = False
        opened: concurrent.futures.Future[None] = concurrent.futures.Future()
        asyncio.run_coroutine_threadsafe(self._pump(open_stream, opened), loop)
        opened.result()  # raises what opening the stream raised (an unknown model)

    async def _pump(
        self,
        open_stream: Callable[[], AsyncIterator[InferResponse | InferdError]],
        opened: concurrent.futures.Future[None],
    ) -> None:
        try:
            stream = open_stream()
        except BaseException as exc:
            opened.set_exception(exc)
            return
        opened.set_result(None)
        try:
            async for item in stream:
                self._items.put(item)
        except InferdError as exc:
            self._items.put(exc)
        except Exception as exc:
            self._items.put(InternalError(f"{type(exc).__name__}: {exc}"))
        finally:
            self._items.put(None)

    def __iter__(self) -> ThreadStream:
        return self

    def __next__(self) -> InferResponse | InferdError:
        if self._done:
            raise StopIteration
        item = self._items.get()
        if item is None:
            self._done = True
            raise StopIteration
        return item


def response_sender(
    request: InferRequest, stats: ModelStats, queue: asyncio.Queue[tuple[InferResponse | InferdError | None, bool]]
) -> Callable[[InferResponse | InferdError | None, bool], None]:
    """The ``response_sender`` of a decoupled request: records each response's statistics and
    trace mark, then hands it to ``queue`` on the event loop (models call it from any thread).

    Called on the loop's own thread (a non-blocking instance's engine), it puts at once; once a
    response came from another thread, later ones from the loop queue up behind it (in order).
    """
    loop = asyncio.get_running_loop()
    put = queue.put_nowait
    owner = threading.get_ident()
    crossed = False  # a response came through call_soon_threadsafe

    def deliver(item: tuple[InferResponse | InferdError | None, bool]) -> None:
        nonlocal crossed
        if threading.get_ident() != owner:
            crossed = True
            loop.call_soon_threadsafe(put, item)
        elif crossed:
            loop.call_soon(put, item)
        else:
            put(item)

    state = [time.monotonic_ns(), 0]  # when the previous response was sent, responses so far

    def sender(response: InferResponse | InferdError | None, final: bool) -> None:
        now = time.monotonic_ns()
        start = request.context.get("compute_start_ns", state[0]) if state[1] == 0 else state[0]
        index = state[1]
        if response is None:
            stats.record_response(index, now - start, empty=True)
        else:
            failed = isinstance(response, InferdError)
            cancelled = isinstance(response, InferdError) and response.kind is ErrorKind.CANCELLED
            stats.record_response(index, now - start, ok=not failed, cancelled=cancelled)
            if final and failed and not response.answered:  # type: ignore[union-attr]
                request.context[FAILED_KEY] = True  # the recorder counts the request failed
            if index == 0:
                stats.observe_first_response(now - request.arrival_ns)
        trace = request.context.get(TRACE_KEY)
        if trace is not None:
            trace.mark("INFER_RESPONSE_COMPLETE", now)
        state[0], state[1] = now, index + 1
        deliver((response, final))

    return sender
