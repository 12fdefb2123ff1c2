"""Loads on demand and evictions at a lower OS priority than requests (Linux: a thread's nice value).

A model's load (reading its files, building its instances, a Python model's ``initialize``) and
unload run on threads beside the ones that answer requests; on a machine with few cores, a load
takes CPU time from the warm requests of the models already serving (loads on demand under a
memory budget load and evict all the time). Inside :func:`lowering` (on-demand loading's tasks),
:func:`lowered` runs a load's blocking work on its thread at a nice value :func:`configure` d
higher (``--model-load-nice``, 10 by default), so the scheduler gives the requests' threads the
cores first. Other loads (at start, through the API, under poll) run as requests do: nothing
serves yet, or the load was asked for.

Threads inherit their creator's nice value, and a model's threads (an instance's, a runtime's
pool) are created during its load: :func:`lowered` puts every thread created meanwhile back to the
process's priority. An unprivileged process may raise a thread's nice value but not lower it back
(that takes ``CAP_SYS_NICE`` or ``RLIMIT_NICE``); where it may not, :func:`lowered` changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_TASKS = "/proc/self/task"
_BASE = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0
#: How much higher a load's thread's nice value is than the process's (0: loads run as requests do).
_nice = 10
_allowed: bool | None = None
#: Threads inside :func:`lowered` now (by native id): left lowered by the others' clean-up.
_lowering: set[int] = set()
_lock = threading.Lock()
#: Whether the loads and unloads of this context run lower (set by :func:`lowering`).
_LOWER: ContextVar[bool] = ContextVar("inferd.load_lower", default=False)


def lowering() -> None:
    """From now on, the loads and unloads of this task (and of the tasks and threads it starts) run
    at the lower priority."""
    _LOWER.set(True)


def configure(nice: int) -> None:
    """``--model-load-nice``: how much lower loads run (0 to 19; 0: not lower)."""
    global _nice, _allowed
    _nice = max(0, min(19, nice))
    _allowed = None


def _check() -> bool:
    """Whether this process may lower a thread's nice value back after raising it (tried once, on
    a thread of its own)."""
    outcome = [False]

    def attempt() -> None:
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, _BASE + 1)
            os.setpriority(os.PRIO_PROCESS, tid, _BASE)
        except OSError:
            return
        outcome[0] = True

    thread = threading.Thread(target=attempt, name="inferd-priority-check")
    thread.start()
    thread.join()
    return outcome[0]


def allowed() -> bool:
    """Whether :func:`lowered` lowers anything here (a nice value set, Linux, and the process may
    restore priorities)."""
    global _allowed
    if _allowed is None:
        _allowed = _nice > 0 and os.path.isdir(_TASKS) and hasattr(os, "setpriority") and _check()
    return _allowed


def lowered(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on this thread at the lower priority (inside :func:`lowering`, where
    :func:`allowed`); the threads it creates are put back to the process's priority when it returns."""
    if not _LOWER.get() or not allowed():
        return fn(*args, **kwargs)
    tid = threading.get_native_id()
    before = set(os.listdir(_TASKS))
    with _lock:
        _lowering.add(tid)
    os.setpriority(os.PRIO_PROCESS, tid, min(19, _BASE + _nice))
    try:
        return fn(*args, **kwargs)
    finally:
        with _lock:
            _lowering.discard(tid)
            created = {int(t) for t in set(os.listdir(_TASKS)) - before} - _lowering
        for thread in (*created, tid):
            with contextlib.suppress(OSError):  # (one that ended meanwhile)
                os.setpriority(os.PRIO_PROCESS, thread, _BASE)
