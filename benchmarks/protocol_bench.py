"""What the in-process protocol benchmarks (``h1_protocol.py``, ``h2_protocol.py``) share: a
transport that writes nowhere, one measurement in a fresh process of this or another checkout,
and the before/after rounds and their summary."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class FakeTransport:
    """The transport calls a protocol makes besides writing (subclasses say what a write does)."""

    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    abort = close

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def run_once(script: str, args: list[str], checkout: Path | None) -> float:
    """The number ``script --one ...`` prints last, run in a fresh process with this checkout's
    sources, or ``checkout``'s first on ``PYTHONPATH``."""
    env = dict(os.environ)
    if checkout is not None:
        paths = [checkout / "core" / "src", *sorted(checkout.glob("plugins/*/src"))]
        env["PYTHONPATH"] = os.pathsep.join(str(p.resolve()) for p in paths)
    out = subprocess.run([sys.executable, script, *args], env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def compare(baseline: Path | None, rounds: int, measure: Callable[[Path | None], float]) -> dict[str, list[float]]:
    """``measure`` of this checkout (and ``baseline``'s) ``rounds`` times, in turn: each other round
    in reverse order, so a machine whose speed drifts weighs on both alike."""
    builds: list[tuple[str, Path | None]] = [("this", None)]
    if baseline is not None:
        builds.append(("baseline", baseline))
    results: dict[str, list[float]] = {name: [] for name, _ in builds}
    for round_ in range(rounds):
        for name, checkout in builds if round_ % 2 == 0 else builds[::-1]:
            results[name].append(measure(checkout))
    return results


def summary(title: str, results: dict[str, list[float]]) -> None:
    """Print each checkout's median (and every value), then the median of the same-round ratios."""
    print(f"\n{title}:")
    for name, values in results.items():
        print(f"  {name}: {statistics.median(values):.1f} us  (all: {', '.join(f'{v:.1f}' for v in sorted(values))})")
    if "baseline" in results:
        ratios = [a / b for a, b in zip(results["this"], results["baseline"], strict=True)]
        print(f"  this/baseline: {statistics.median(ratios):.3f} (median of the same-round ratios)")
