"""The memory budget of on-demand loading (``--model-memory-budget``): its size, what each loaded
model holds, and which idle models make room for a load.

A model's footprint is the growth of the process's resident memory (RSS) over its load, measured
when it loads (a load that measures runs alone, so it measures only itself). The budget counts
the footprints of the models loaded; before a load it picks the least recently used models that
may go (:func:`choose_victims`): the caller says which may (idle, not pinned, no ensemble in use
calls them). Nothing here touches a model: :mod:`inferd.lifecycle.on_demand` acts on the choice.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_budget(text: str, total: int | None = None) -> int:
    """``--model-memory-budget``: bytes (``8589934592``, ``8G``, ``512MiB``) or a share of the
    machine's memory (``0.5``, ``50%``; of the cgroup's limit where one is set). Raises
    ``ValueError`` naming what is wrong."""
    value = text.strip()
    if value.endswith("%"):
        share = float(value[:-1]) / 100
    elif re.fullmatch(r"0?\.\d+|1(\.0*)?", value):
        share = float(value)
    else:
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(
                f"--model-memory-budget '{text}': give bytes (8589934592, 8G, 512MiB) or a share of the "
                "machine's memory (0.5, 50%)"
            )
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
        if size <= 0:
            raise ValueError(f"--model-memory-budget '{text}': the budget must be more than 0 bytes")
        return size
    if not 0 < share <= 1:
        raise ValueError(f"--model-memory-budget '{text}': a share of the memory is more than 0 and at most 1 (100%)")
    return int(share * (total if total is not None else machine_memory()))


def machine_memory() -> int:
    """The memory this process may use: the cgroup's limit (v2, then v1) where it is below the machine's."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            return int(text)
    return total


_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


#: Blocks this large or larger are mapped on their own once
#: :func:`inferd.lifecycle.reclaim.map_large_blocks` ran.
LARGE_BLOCK = 1 << 20


@dataclass(frozen=True)
class Loaded:
    """A loaded model as eviction sees it."""

    key: str
    footprint: int
    #: When it last served a request or finished loading (``time.monotonic()``).
    last_used: float
    #: Idle, not pinned, and called by no ensemble in use: it may be evicted.
    evictable: bool
    #: What it holds on each device (``--model-device-memory-budget``), by device.
    device: Mapping[str, int] = field(default_factory=dict)


def choose_victims(
    loaded: Iterable[Loaded],
    need: int,
    budget: int | None,
    device_need: Mapping[str, int] | None = None,
    device_budgets: Mapping[str, int] | None = None,
) -> list[str] | None:
    """The least recently used evictable models whose eviction makes room for ``need`` more bytes
    under ``budget`` (None: no host budget) and ``device_need`` more on each device under its
    ``device_budgets``; [] when it fits already, None when evicting every evictable one would not
    do. While only devices are short, a model that holds nothing on them is not taken."""
    models = list(loaded)
    device_need, device_budgets = device_need or {}, device_budgets or {}
    used = sum(m.footprint for m in models)
    on = Counter[str]()
    for m in models:
        on.update(m.device)

    def short() -> set[str]:
        """The budgets ("" for the host's) that the load would pass."""
        over = {d for d, limit in device_budgets.items() if on[d] + device_need.get(d, 0) > limit}
        return over | {""} if budget is not None and used + need > budget else over

    if not short():
        return []
    victims: list[str] = []
    for m in sorted((m for m in models if m.evictable), key=lambda m: m.last_used):
        over = short()
        if "" not in over and not any(m.device.get(d, 0) for d in over):
            continue  # it frees nothing the load is short of
        victims.append(m.key)
        used -= m.footprint
        on.subtract(m.device)
        if not short():
            return victims
    return None


def shown_bytes(size: float) -> str:
    """``size`` for people: ``512 MiB``, ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit in ("B", "KiB") or size >= 100 else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
