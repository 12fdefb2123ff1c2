"""Ending a stub together with every process its model started (Linux).

A model may start processes of its own, and one that calls ``setsid`` (a daemon) leaves the stub's
process group, so signalling the group misses it. The stub therefore makes itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``, in :data:`~inferd_backend_python.stub.BOOT`): a process
whose parent exits is re-parented to the stub instead of to init, so everything the model started
stays in the stub's process tree for as long as the stub lives. :func:`end` walks that tree through
``/proc/<pid>/task/<tid>/children`` (or, where the kernel lacks it, every ``/proc/<pid>/stat``),
stopping each process it finds (``SIGSTOP``) so that none can start another or exit and have its
pid reused meanwhile, walks again until nothing new turns up, then kills them all (``SIGKILL``).
With a grace period, the descendants are first asked to stop (``SIGTERM``) and given that long.

A stub that dies on its own (a crash, or the server killed with ``SIGKILL``) can no longer hold
its descendants: they go to init, as they would under Triton.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

#: Walks of a stopped tree before it is killed as found (each walk stops what it finds, so a
#: second walk finds nothing new unless a process forked between being listed and stopped).
_WALKS = 16


def _children(pid: int) -> list[int]:
    """``pid``'s children (every thread's), by ``/proc``; [] once it is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return _children_by_stat(pid)  # a kernel without CONFIG_PROC_CHILDREN
        except (OSError, ValueError):
            continue
    return out


def _children_by_stat(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
            if len(fields) > 1 and int(fields[1]) == pid:
                out.append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree, parents before their children."""
    found: list[int] = []
    queue = [pid]
    while queue:
        children = _children(queue.pop())
        found.extend(children)
        queue.extend(children)
    return found


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):  # gone already
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def end(proc: subprocess.Popen[bytes], grace: float = 0.0) -> None:
    """Kill the stub ``proc`` and every process below it (see the module's docstring); with
    ``grace``, its descendants are first sent ``SIGTERM`` and given up to ``grace`` seconds to exit
    (blocking for that long at most: not on the event loop)."""
    if proc.poll() is not None:  # reaped: its pid may be another process's now
        return
    if grace > 0:
        below = descendants(proc.pid)
        for pid in below:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(_alive(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.02)
    with contextlib.suppress(OSError):
        proc.send_signal(signal.SIGSTOP)  # it starts nothing more while its tree is walked
    stopped: set[int] = set()
    for _ in range(_WALKS):
        new = [pid for pid in descendants(proc.pid) if pid not in stopped]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped.update(new)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
