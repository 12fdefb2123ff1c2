"""One isolated Python model's round trip without HTTP: the server's ``ProcessInstance.execute`` to its stub and back.

Loads the ``add_sub`` model (FP32 [4] + [4]) with ``EXECUTION_MODE: process`` through the python backend, on
an event loop of its own, and sends it ``--requests`` batch-1 requests one after the other. Prints the wall
time and the CPU time (user, system) of this process (the server side) and of the stub per round trip.
CPU times are in clock ticks (10 ms): use some thousands of requests. Under ``valgrind --tool=callgrind
--trace-children=yes``, run it with two request counts and ``--wait-exit``: the difference of the totals
over the difference of the counts is the instructions per round trip of each side, which a busy machine
does not disturb (set ``PYTHONHASHSEED`` for repeatable counts). ``--runner`` goes through core's ``Runner`` as the server's schedulers do (its timing,
statistics and the hand-over of the stub's answer to the waiting request). The event loop is the server's
(uvloop's when installed; ``--asyncio``: asyncio's own).

    .venv/bin/python benchmarks/python_isolation_roundtrip.py --requests 20000 [--runner]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from inferd.config.parse import load_config
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from inferd.contracts.types import InferRequest, InferTensor, RequestedOutput
from inferd.engine import gc_settings
from inferd.engine.recorder import Recorder
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from inferd.serving.runner import run as run_loop
from inferd_backend_python import ipc
from inferd_backend_python.backend import PythonBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from python_isolation import CONFIG, MODEL_PY, PROCESS


def cpu(pid: int) -> np.ndarray:
    """(user, system) CPU seconds of ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return np.array([int(fields[11]), int(fields[12])]) / os.sysconf("SC_CLK_TCK")


async def run(repo: Path, requests: int, wait_exit: bool, through_runner: bool) -> None:
    loop = asyncio.get_running_loop()
    model_dir = repo / "add_sub"
    config = load_config(model_dir)
    context = ModelLoadContext("add_sub", 1, config, model_dir, model_dir / "1", repo, None, loop)
    model = await loop.run_in_executor(None, PythonBackend().load_model, context)
    spec = InstanceSpec("add_sub_0", "KIND_CPU", 0, 0, "add_sub")
    instance = await loop.run_in_executor(None, model.create_instance, spec)
    a = np.arange(4, dtype=np.float32)
    execute = instance.execute
    if through_runner:
        execute = Runner(instance, spec, Recorder(ModelStats("add_sub", "1"), 0)).run

    def request() -> InferRequest:
        inputs = {name: InferTensor(name, "FP32", (4,), a) for name in ("INPUT0", "INPUT1")}
        return InferRequest("add_sub", "", "", inputs, [RequestedOutput("OUTPUT0")], {})

    for _ in range(500):  # warm up
        results = await execute([request()])
    assert np.array_equal(results[0].outputs[0].data, a * 2), results
    gc_settings.settle()  # as a started server does (the stub does so after initialize)
    stub = instance.stub
    server0, stub0, wall0 = cpu(os.getpid()), cpu(stub.pid), time.perf_counter()
    for _ in range(requests):
        await execute([request()])
    wall = (time.perf_counter() - wall0) / requests * 1e6
    server, child = (cpu(os.getpid()) - server0) / requests * 1e6, (cpu(stub.pid) - stub0) / requests * 1e6
    print(
        f"{requests} round trips: {wall:.1f} µs wall; CPU µs: server {server.sum():.1f} (user {server[0]:.0f}, "
        f"system {server[1]:.0f}), stub {child.sum():.1f} (user {child[0]:.0f}, system {child[1]:.0f})"
    )
    if wait_exit:  # let the stub exit by itself (a profiler in it writes its results)
        stub.send(ipc.FINALIZE, None)
        await loop.run_in_executor(None, stub.proc.wait)
        return
    await loop.run_in_executor(None, instance.close)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20000, help="timed round trips (default 20000)")
    p.add_argument("--wait-exit", action="store_true", help="let the stub exit by itself at the end")
    p.add_argument("--runner", action="store_true", help="through core's Runner, as a server runs it")
    p.add_argument("--asyncio", action="store_true", help="on asyncio's event loop, not the server's (uvloop)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="inferd-bench-roundtrip-") as tmp:
        model_dir = Path(tmp) / "add_sub"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "config.pbtxt").write_text(CONFIG.format(n=4, extra=PROCESS))
        (model_dir / "1" / "model.py").write_text(MODEL_PY)
        main = run(Path(tmp), args.requests, args.wait_exit, args.runner)
        asyncio.run(main) if args.asyncio else run_loop(main)


if __name__ == "__main__":
    main(sys.argv[1:])
