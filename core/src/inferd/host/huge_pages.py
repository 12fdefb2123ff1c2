"""``inferd serve`` starts over once with glibc's allocator asking for transparent huge pages.

Where the kernel gives huge pages only to memory that asks for them (``madvise``, the default of
most distributions), glibc 2.35 and later ask for them when ``GLIBC_TUNABLES`` holds
``glibc.malloc.hugetlb=1``. A model's load then faults its weights in 2 MiB at a time instead of
4 KiB, and its unload unmaps a few hundred pages instead of thousands. Measured with
``benchmarks/many_models.py --seconds 15 --megabytes 48`` (loads on demand under a budget, ONNX and
Python models of 48 MiB, four alternating runs): an ONNX load's p50 fell from 130-137 to 67-82
ms, a cold request's from 158 to 85-106 ms, and the server answered 1.5-1.7 times the requests;
onnxruntime's own session for such a model builds in 21-23 ms instead of 80-96 and closes in 0.5
ms instead of 3-4.

The allocator reads its tunables once, when the process starts, so the command line runs again
(the same process: ``execve`` keeps its pid) with the variable set; the workers, a Python model's
stub process and vLLM's engine inherit it. A ``GLIBC_TUNABLES`` that already says ``hugetlb``
(``glibc.malloc.hugetlb=0`` turns this off) is left as it is, and so is every system where it
would change nothing: another C library, glibc before 2.35, huge pages ``always`` or ``never``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping

#: The tunable, and the variable glibc reads it from.
TUNABLE = "glibc.malloc.hugetlb"
VARIABLE = "GLIBC_TUNABLES"
_THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"
#: Set in the process that started over. glibc may drop tunables from the environment of a process
#: that runs with raised privileges (setuid, or a Python given ``cap_net_bind_service`` to listen on
#: port 80): without this, such a process could start over again and again.
STARTED_OVER = "INFERD_STARTED_OVER"


def _glibc_version() -> tuple[int, int]:
    try:
        name, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else (0, 0)
    except (ValueError, OSError):
        return (0, 0)


def _thp_on_request() -> bool:
    """Whether the kernel gives transparent huge pages to memory that asks (``[madvise]``)."""
    try:
        with open(_THP_MODE, encoding="ascii") as f:
            return "[madvise]" in f.read()
    except OSError:
        return False


def with_huge_pages(current: str) -> str | None:
    """``GLIBC_TUNABLES``'s value ``current`` with the tunable added; None where it already names it."""
    if TUNABLE in current:
        return None
    return f"{current}:{TUNABLE}=1" if current else f"{TUNABLE}=1"


def wanted(environ: Mapping[str, str]) -> str | None:
    """The ``GLIBC_TUNABLES`` value to start over with, or None where it would change nothing."""
    if _glibc_version() < (2, 35) or not _thp_on_request():
        return None
    return with_huge_pages(environ.get(VARIABLE, ""))


def start_over_with_huge_pages() -> None:
    """Run this process's command line again with :func:`wanted`'s tunables; returns where none are
    wanted, where the command line is not known, where it cannot run again, and in the process
    that already started over (:data:`STARTED_OVER`)."""
    value = wanted(os.environ)
    argv = getattr(sys, "orig_argv", None)
    if value is None or not argv or not sys.executable or os.environ.get(STARTED_OVER):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.execve(sys.executable, argv, {**os.environ, VARIABLE: value, STARTED_OVER: "1"})
