"""The per-device memory budget of on-demand loading (``--model-device-memory-budget cuda:0=20GiB``).

A backend reports what a loaded version holds on each device (``Model.memory_usage``, plugin API
1.2); core only counts it, by the device names backends give (``cuda:0``), and never imports a
framework. A share of a device (``cuda:0=0.8``) is resolved once, at start, from what ``nvidia-smi``
reports of the devices this process sees (``CUDA_VISIBLE_DEVICES`` respected); without it, give bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping

from inferd.lifecycle.budget import _SIZE, _UNITS, shown_bytes

FLAG = "--model-device-memory-budget"
_DEVICE = re.compile(r"^[a-z][a-z0-9_]*:\d+$")


def parse_device_budgets(texts: Iterable[str], totals: Callable[[], Mapping[str, int]] | None = None) -> dict[str, int]:
    """``DEVICE=SIZE`` settings by device (a later one for a device wins): bytes (``20GiB``,
    ``21474836480``) or a share of the device's memory (``0.8``, ``80%``; ``totals`` reads each
    device's memory, by default from ``nvidia-smi``). Raises ``ValueError`` naming what is wrong."""
    budgets: dict[str, int] = {}
    known: Mapping[str, int] | None = None
    for text in texts:
        device, sep, value = text.partition("=")
        device, value = device.strip().lower(), value.strip()
        if not sep or not _DEVICE.match(device):
            raise ValueError(f"{FLAG} '{text}': give DEVICE=SIZE, e.g. cuda:0=20GiB or cuda:0=0.8")
        share = _share(value)
        if share is None:
            match = _SIZE.match(value)
            if match is None:
                raise ValueError(
                    f"{FLAG} '{text}': give bytes (20GiB, 21474836480) or a share of the device's memory (0.8, 80%)"
                )
            size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
        else:
            if not 0 < share <= 1:
                raise ValueError(f"{FLAG} '{text}': a share of the device's memory is more than 0 and at most 1")
            if known is None:
                known = (totals or nvidia_totals)()
            if device not in known:
                seen = ", ".join(f"{d} ({shown_bytes(n)})" for d, n in sorted(known.items())) or "none"
                raise ValueError(
                    f"{FLAG} '{text}': the memory of {device} is unknown (nvidia-smi reports: {seen}); give bytes"
                )
            size = int(share * known[device])
        if size <= 0:
            raise ValueError(f"{FLAG} '{text}': the budget must be more than 0 bytes")
        budgets[device] = size
    return budgets


def _share(value: str) -> float | None:
    if value.endswith("%"):
        try:
            return float(value[:-1]) / 100
        except ValueError:
            return None
    return float(value) if re.fullmatch(r"0?\.\d+|1(\.0*)?", value) else None


def nvidia_totals() -> dict[str, int]:
    """Each CUDA device's memory in bytes by the name frameworks give it (``cuda:0`` is the first
    device ``CUDA_VISIBLE_DEVICES`` names), as ``nvidia-smi`` reports it; {} without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.count(",") == 2]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        picked = []
        for entry in (e.strip() for e in visible.split(",") if e.strip()):
            found = [r for r in rows if r[0] == entry or r[1].startswith(entry)]
            if not found:
                break  # CUDA ignores the devices after the first it cannot find
            picked.append(found[0])
        rows = picked
    return {f"cuda:{i}": int(float(r[2])) << 20 for i, r in enumerate(rows) if _number(r[2])}


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def shown_devices(sizes: Mapping[str, int]) -> str:
    """``cuda:0 20 GiB, cuda:1 8.0 GiB`` ("" for none)."""
    return ", ".join(f"{d} {shown_bytes(n)}" for d, n in sorted(sizes.items()) if n)


def on_devices(sizes: Mapping[str, int]) -> str:
    """``, cuda:0 1.0 GiB`` for a log line ("" for none)."""
    shown = shown_devices(sizes)
    return f", {shown}" if shown else ""


def no_room(
    name: str,
    need: int,
    device_need: Mapping[str, int],
    budget: int | None,
    device_budgets: Mapping[str, int],
    busy: list[str],
) -> str:
    """Why a load on demand cannot start: the budgets are held by models that may not go (``busy``)."""
    parts = [] if budget is None else [f"{shown_bytes(budget)}, --model-memory-budget"]
    if device_budgets:
        parts.append(f"{shown_devices(device_budgets)}, {FLAG}")
    held = f"the memory budget{'s' if len(parts) > 1 else ''} ({'; '.join(parts)})"
    on = f" and {shown_devices(device_need)}" if shown_devices(device_need) else ""
    return (
        f"model '{name}' cannot be loaded now: it needs about {shown_bytes(need)}{on} and {held} is held by "
        f"models that are busy, pinned or steps of a loaded ensemble ({', '.join(busy[:8])}"
        f"{'...' if len(busy) > 8 else ''}); retry later"
    )
