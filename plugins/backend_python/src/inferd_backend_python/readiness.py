"""A Python model's ``is_ready``: asked for each readiness request, one call at a time per instance.

Triton's Python backend calls the model's ``is_ready()`` (sync or ``async def``) whenever the model's
readiness is asked and the model defines one; a model without it is ready as long as it serves. The
answer must be a ``bool``; another value, an exception, or no answer within :data:`TIMEOUT_S` makes
that one check fail. While one call is in flight, further asks wait for its answer instead of
calling again, so a slow ``is_ready`` is never run more than once at a time per instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

#: Seconds a readiness request waits for ``is_ready`` (Triton's 5 s).
TIMEOUT_S = 5.0


def answer(result: object) -> bool:
    """``is_ready``'s return value as a bool; TypeError for anything else, as Triton refuses it."""
    if not isinstance(result, bool):
        raise TypeError(f"is_ready() must return a boolean value; it returned {type(result).__name__}")
    return result


class Probe:
    """One instance's ``is_ready``. ``start`` begins a call and returns its future (True: ready)."""

    def __init__(self, label: str, start: Callable[[], asyncio.Future[bool]]) -> None:
        self.label = label
        self._start = start
        self._inflight: asyncio.Future[bool] | None = None

    async def ask(self) -> str | None:
        """None when the instance says it is ready, else why not (naming the instance)."""
        inflight = self._inflight
        if inflight is None or inflight.done():
            inflight = self._inflight = self._start()
            inflight.add_done_callback(_retrieved)  # an answer after every asker gave up is no error
        try:
            ready = await asyncio.wait_for(asyncio.shield(inflight), TIMEOUT_S)
        except TimeoutError:
            return f"{self.label}: is_ready() did not answer within {TIMEOUT_S:g} s"
        except Exception as exc:
            return f"{self.label}: is_ready() failed: {type(exc).__name__}: {exc}"
        return None if ready else f"{self.label}: is_ready() returned False"


def _retrieved(future: asyncio.Future[bool]) -> None:
    if not future.cancelled():
        future.exception()


def on_thread(work: Callable[[], bool]) -> asyncio.Future[bool]:
    """Run ``work`` (the model's code) on a daemon thread of its own; its future on the running loop.
    A call that never returns keeps only its thread, and does not hold up the server's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[bool] = loop.create_future()

    def settle(result: bool | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(bool(result))

    def run() -> None:
        result, error = None, None
        try:
            result = work()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the server stopped, nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="inferd-python-is-ready", daemon=True).start()
    return future


async def first_problem(probes: list[Probe]) -> str | None:
    """Ask every probe at once; the first failure, in instance order, or None when all are ready."""
    if not probes:
        return None
    if len(probes) == 1:
        return await probes[0].ask()
    return next((p for p in await asyncio.gather(*(p.ask() for p in probes)) if p is not None), None)
