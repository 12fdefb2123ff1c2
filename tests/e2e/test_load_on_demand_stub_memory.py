"""The memory budget counts what the server's own RSS cannot see: a process-isolated Python model
(``EXECUTION_MODE: process``) holds its memory in its stub process, and reports the stub's RSS
(``Model.memory_usage``, plugin API 1.2).

MODELS isolated ``memory_hog`` models each hold SIZE MiB in their stub. By the server's RSS growth
alone (a few MiB each) they would all fit the budget; counted with their stubs' RSS only a couple
do, so requests over all of them evict. Every request is answered correctly, each footprint shows
at least SIZE MiB, and the server's RSS plus its stubs' (read from /proc) stays within the base, the
budget and a stated margin."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source

MB = 1 << 20
MODELS = 5
SIZE = 30  # MiB each stub holds besides its interpreter
#: About two stubs (each its interpreter, numpy and SIZE MiB: ~70-90 MiB); five would need ~400 MiB.
BUDGET = 200 * MB
#: What the peak may pass base + budget by: one load beyond the budget (a first load's footprint is
#: known only once it loaded, and its victims go after it), the stubs' growth while they serve, and
#: the server's under traffic (buffers, threads): one stub of ~90 MiB plus 40 MiB.
MARGIN = 90 * MB + 40 * MB
_PAGE = 4096


def _isolated(ident: int) -> dict[str, str]:
    config = source("memory_hog", "config.pbtxt").replace("MEGABYTES", str(SIZE)).replace("IDENT", str(ident))
    config += 'parameters { key: "EXECUTION_MODE" value { string_value: "process" } }\n'
    return {"config.pbtxt": config, "1/model.py": source("memory_hog")}


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from each process's parent in /proc/<pid>/stat)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                found.append(child)
                todo.append(child)
    return found


def _held(pid: int) -> int:
    """The server's RSS plus its stubs' (every process below it)."""
    return _rss(pid) + sum(_rss(p) for p in _descendants(pid))


def _metric(srv: ServerProcess, name: str, model: str | None = None) -> float:
    text = requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).text
    label = r"(?:\{[^}]*\})?" if model is None else rf'\{{model="{re.escape(model)}"\}}'
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}{label} (\S+)$", text, re.MULTILINE))


def _call(srv: ServerProcess, model: str, grpc: bool) -> int:
    module = grpcclient if grpc else httpclient
    x = module.InferInput("MS", [1], "INT32")
    x.set_data_from_numpy(np.array([0], dtype=np.int32))
    if grpc:
        return int(
            grpcclient.InferenceServerClient(srv.grpc_url).infer(model, [x], client_timeout=120).as_numpy("ID")[0]
        )
    client = httpclient.InferenceServerClient(srv.http_url, network_timeout=120)
    return int(client.infer(model, [x]).as_numpy("ID")[0])


def test_isolated_models_are_evicted_for_their_stubs_memory(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {f"p{i}": _isolated(i) for i in range(MODELS)})
    flags = ["--workers", "1", "--model-load-on-demand=true", f"--model-memory-budget={BUDGET}"]
    with ServerProcess([repo], flags) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        base = _held(pid)
        peak, stop = [base], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _held(pid))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        answers, footprints = [], {}
        try:
            for round_ in range(3):
                for i in range(MODELS):
                    name = f"p{i}"
                    answers.append((i, _call(srv, name, grpc=(i + round_) % 2 == 1)))
                    footprints[name] = _metric(srv, "inferd_model_footprint_bytes", name)
        finally:
            stop.set()
            watcher.join()
        evictions = _metric(srv, "inferd_model_evictions_total")
        used = _metric(srv, "inferd_model_memory_budget_used_bytes")
        log = srv.log()

    assert answers == [(i, i) for _ in range(3) for i in range(MODELS)]
    # each footprint counts its stub: at least what the stub's initialize holds
    assert all(f >= SIZE * MB for f in footprints.values()), {k: v / MB for k, v in footprints.items()}
    # all five would fit by the server's RSS growth; counting the stubs, each round evicts
    assert evictions >= MODELS, (
        evictions,
        used / MB,
        {k: v / MB for k, v in footprints.items()},
        peak[0] / MB,
        base / MB,
    )
    assert 0 < used <= BUDGET
    assert re.search(
        r"model 'p\d' evicted \(idle [\d.]+ s, 0 requests in flight or queued, footprint (\d+\.\d|\d+) MiB", log
    )
    assert peak[0] <= base + BUDGET + MARGIN, (peak[0] / MB, base / MB, BUDGET / MB, MARGIN / MB)
