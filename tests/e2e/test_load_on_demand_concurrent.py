"""``--model-load-on-demand-concurrency``: evicted models (their footprints known) requested at once
load together, while first loads (which measure their footprints) still run one at a time; loads
that run together stay within the memory budget, since it counts each one's expected footprint.

Every model is ``memory_hog`` (tests/fixtures/python_models) holding SIZE MiB, whose initialize
sleeps INIT_S first: a load takes about INIT_S, so N loads one at a time take N x INIT_S."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.triton_clients import repository_index

MB = 1 << 20
SIZE = 32
INIT_S = 1.0
MODELS = 8
BUDGET = int(4.5 * SIZE * MB)  # holds 4


def _hog(ident: int) -> dict[str, str]:
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(SIZE)).replace("IDENT", str(ident))
    code = source("memory_hog").replace(
        "    def initialize(self, args):\n", f"    def initialize(self, args):\n        time.sleep({INIT_S})\n"
    )
    return {"config.pbtxt": config, "1/model.py": code}


def _call(url: str, model: str) -> int:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    x = httpclient.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.zeros(1, dtype=np.int32))
    return int(client.infer(model, [x]).as_numpy("ID")[0])


def _at_once(url: str, models: list[str]) -> tuple[list[int], float]:
    """Request ``models`` all at once: their answers, and the seconds until the last came."""
    started = time.monotonic()
    with ThreadPoolExecutor(len(models)) as pool:
        answers = list(pool.map(lambda m: _call(url, m), models))
    return answers, time.monotonic() - started


def _windows(log: str, models: list[str], since: float = 0.0) -> list[tuple[float, float]]:
    """(start, end) in Unix time of each load on demand of ``models`` that ended after ``since`` in
    the log (glog lines, local time)."""
    year = datetime.now().year
    found = re.findall(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*model '(m\d)' loaded on demand in ([\d.]+) s", log, re.M)
    ends = [
        (datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f").timestamp(), float(took))
        for stamp, name, took in found
        if name in models
    ]
    return [(end - took, end) for end, took in ends if end > since]


def _most_at_once(windows: list[tuple[float, float]]) -> int:
    """The most windows that overlap at one moment (by more than the log's rounding: 10 ms)."""
    events = sorted([(s + 0.01, 1) for s, _ in windows] + [(e, -1) for _, e in windows], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _status(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024  # type: ignore[union-attr]


def test_evicted_models_reload_together_first_loads_alone_within_the_budget(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {f"m{i}": _hog(i) for i in range(MODELS)})
    flags = [
        "--workers",
        "1",
        "--model-load-on-demand=true",
        f"--model-memory-budget={BUDGET}",
        "--model-load-on-demand-concurrency=4",
    ]
    with ServerProcess([repo], flags) as srv:
        assert srv.proc is not None
        # first loads measure their footprints: requested at once, they still load one at a time
        first = ["m0", "m1", "m2"]
        answers, _ = _at_once(srv.http_url, first)
        assert answers == [0, 1, 2]
        windows = _windows(srv.log_path.read_text(), first)
        assert len(windows) == 3 and _most_at_once(windows) == 1, windows
        for i in range(3, MODELS):  # the budget holds 4: the least recently used are evicted
            assert _call(srv.http_url, f"m{i}") == i
        index = repository_index(httpclient.InferenceServerClient(srv.http_url))
        evicted = sorted(name for (name, _), (state, _) in index.items() if state == "EVICTED")
        assert len(evicted) >= 3, index
        again = evicted[:4]
        # reloads of known footprints, requested at once, load together (4 at a time)
        before = _status(srv.proc.pid, "VmRSS")
        Path(f"/proc/{srv.proc.pid}/clear_refs").write_text("5")  # VmHWM from now on
        since = time.time()
        answers, seconds = _at_once(srv.http_url, again)
        peak = _status(srv.proc.pid, "VmHWM")
        assert answers == [int(name[1:]) for name in again]
        windows = _windows(srv.log_path.read_text(), again, since)
        assert len(windows) == len(again) and _most_at_once(windows) >= 2, windows
        assert seconds < 0.8 * len(again) * INIT_S + 0.5, (seconds, windows)  # one at a time: >= len x INIT_S
        # the loads together did not pass the budget: each made room (evicting) before it started.
        # What may come on top of the memory before: one model (a load's pages that exist before the
        # eviction that made room for it has given its own back is at most one model's) and slack.
        assert peak <= before + SIZE * MB + 24 * MB, ((peak - before) / MB, seconds)
        used = [
            (float(u), float(b))
            for u, b in re.findall(r"budget ([\d.]+) MiB of ([\d.]+) MiB used", srv.log_path.read_text())
        ]
        assert used and all(u <= b for u, b in used), used
        print(
            f"\n{len(again)} reloads at once in {seconds:.2f} s (one at a time: >= {len(again) * INIT_S:g} s), "
            f"{_most_at_once(windows)} together at most; peak {(peak - before) / MB:+.0f} MiB over the RSS before"
        )
