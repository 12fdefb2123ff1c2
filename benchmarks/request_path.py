"""inferd's own CPU time per infer request, without sockets or load generators.

Starts an in-process server (no frontends) on vs_triton.py's generated models and drives the HTTP
infer route's handler (``InferEndpoint.answer``: body decode, validation, scheduling, dynamic
batching, the instance's hand-off, encode) with N concurrent callers, each sending the same
binary-extension request as wrk does in vs_triton.py. It prints, per request, the CPU time of the
event loop's thread and of the instance threads (``time.thread_time`` and
``/proc/self/task/*/stat``: CPU time, so a busy machine slows the run but barely moves the
numbers), and the model's own time (the execution statistics' compute time). What the socket and
HTTP parsing cost comes on top: see vs_triton.py's null rows.

    .venv/bin/python benchmarks/request_path.py --models tiny,mlp --concurrency 64 --requests 20000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_bench import models, wire

from inferd.frontends.http.infer import InferEndpoint, RequestHead
from inferd.host.server import Server, ServerOptions
from inferd.serving import run

TICKS = os.sysconf("SC_CLK_TCK")


def _thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process, by native thread id."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


async def _drive(endpoint: InferEndpoint, name: str, x: np.ndarray, concurrency: int, total: int) -> int:
    request = wire.build_request("http-binary", name, x)
    headers = [(k.lower().encode(), v.encode()) for k, v in request.headers.items()]
    head, body = RequestHead(headers), request.body
    left = total
    failures = 0

    async def caller() -> None:
        nonlocal left, failures
        while left > 0:
            left -= 1
            reply = await endpoint.answer(head, body, name, "", None, "/")
            failures += reply.status != 200

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return failures


async def _measure(repo: Path, name: str, x: np.ndarray, concurrency: int, total: int) -> dict[str, float]:
    server = Server(
        ServerOptions(
            [repo],
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
            settle_gc=True,
            extra={"allow_openai": False},
        )
    )
    await server.start()
    try:
        endpoint = InferEndpoint(server.dataplane)
        await _drive(endpoint, name, x, concurrency, min(total, 2000))  # warm up
        stats_before = server.dataplane.statistics_entries(name, "")
        loop_id = threading.get_native_id()
        cpu_before, loop_before, wall = _thread_cpu(), time.thread_time(), time.perf_counter()
        failures = await _drive(endpoint, name, x, concurrency, total)
        loop_cpu, wall = time.thread_time() - loop_before, time.perf_counter() - wall
        cpu_after = _thread_cpu()
        stats_after = server.dataplane.statistics_entries(name, "")
    finally:
        await server.stop()
    others = sum(cpu_after[t] - cpu_before.get(t, 0.0) for t in cpu_after if t != loop_id)
    compute = _compute_ns(stats_after) - _compute_ns(stats_before)
    return {
        "loop_us": loop_cpu / total * 1e6,
        "threads_us": others / total * 1e6,
        "compute_us": compute / total / 1e3,
        "rate": total / wall,
        "failures": failures,
    }


def _compute_ns(stats: list[dict]) -> int:
    """The model's own time, per execution (a batch counted once)."""
    keys = ("compute_input", "compute_infer", "compute_output")
    return sum(int(b[k]["ns"]) for b in stats[0]["batch_stats"] for k in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny,mlp")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--batching", choices=("on", "off"), default="on")
    args = parser.parse_args()
    names = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        generated = models.generate(names, Path(tmp))
        models.write_repositories(generated, Path(tmp), 64, 2, 1)
        repo = Path(tmp) / "inferd-models"
        print(
            f"{'model':<14}{'loop CPU us/req':>17}{'instance threads us/req':>25}{'model time (wall)':>22}"
            f"{'req/s (in-process)':>20}"
        )
        for name in names:
            served = models.served_name(name, args.batching == "on")
            x = generated[name].sample_input()
            r = run(_measure(repo, served, x, args.concurrency, args.requests))
            print(
                f"{served:<14}{r['loop_us']:>17.1f}{r['threads_us']:>25.1f}{r['compute_us']:>22.1f}{r['rate']:>20,.0f}"
                + (f"  ({r['failures']:.0f} failed)" if r["failures"] else "")
            )


if __name__ == "__main__":
    main()
