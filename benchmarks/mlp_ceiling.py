"""How far above Triton inferd can get on ``mlp``: each server's per-request time beside onnxruntime's own.

Serves vs_triton.py's ``mlp_batched`` (256→1024→1024→16, dynamic batching, 2 instances, the
same intra-op thread count in both: cores // instances) from the real Triton 2.51 (Python backend
running the ONNX file with onnxruntime) and from ``inferd serve`` with default flags, drives each
row with wrk / h2load as vs_triton.py does, and reads the servers' own statistics
(``/v2/models/mlp_batched/stats``: execution_count and inference_count give the mean batch size).
After each row it times ``session.run`` of the same file in this process at that mean batch size
(the pure compute: no server, no protocol) and prints, per row:

- latency (c / throughput) and server CPU per request (all processes of the server);
- the mean batch and onnxruntime's wall and CPU time per request at that batch;
- the ceiling, on Triton's rows: Triton's server CPU per request over onnxruntime's CPU per request
  at Triton's mean batch (no server costs less than the model's own compute: at c=1 on a quiet
  machine a request's latency follows the CPU on its path, at c>1 throughput is cores over CPU per
  request); and the same with the cheapest null stack's CPU per request added (a Python server that
  only answers). CPU, not wall time: a shared machine stretches wall times, not CPU.

It prints numbers; it asserts nothing. Compare rows of one run only (the machine may be shared).

    .venv/bin/python benchmarks/mlp_ceiling.py --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from triton_bench import load, servers, wire
from triton_bench.models import generate, write_repositories

MODEL = "mlp_batched"


@dataclass
class Stats:
    """The counters of one model's statistics that matter here (summed over versions)."""

    inferences: int = 0
    executions: int = 0
    compute_infer_ns: int = 0
    success_ns: int = 0

    def __sub__(self, other: Stats) -> Stats:
        return Stats(
            self.inferences - other.inferences,
            self.executions - other.executions,
            self.compute_infer_ns - other.compute_infer_ns,
            self.success_ns - other.success_ns,
        )


def read_stats(port: int) -> Stats:
    status, body = servers.http_get(port, f"/v2/models/{MODEL}/stats")
    if status != 200:
        raise RuntimeError(f"stats of {MODEL}: HTTP {status} {body[:200]!r}")
    out = Stats()
    for s in json.loads(body)["model_stats"]:
        out.inferences += int(s.get("inference_count", 0))
        out.executions += int(s.get("execution_count", 0))
        out.compute_infer_ns += int(s["inference_stats"]["compute_infer"]["ns"])
        out.success_ns += int(s["inference_stats"]["success"]["ns"])
    return out


class Compute:
    """onnxruntime's own time for one batch of the model, in this process (the same session options)."""

    def __init__(self, path: Path, threads: int) -> None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        self.cache: dict[int, tuple[float, float]] = {}

    def per_batch(self, batch: int, seconds: float = 0.5) -> tuple[float, float]:
        """(wall, CPU) seconds of one ``session.run`` at ``batch`` rows: the minimum of 5 timed blocks."""
        x = np.random.default_rng(0).standard_normal((batch, 256)).astype(np.float32)
        for _ in range(5):
            self.session.run(["OUTPUT"], {"INPUT": x})
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < seconds / 5:
            self.session.run(["OUTPUT"], {"INPUT": x})
            n += 1
        best = (float("inf"), float("inf"))
        for _ in range(5):
            w, c = time.perf_counter(), time.process_time()
            for _ in range(n):
                self.session.run(["OUTPUT"], {"INPUT": x})
            wall, cpu = (time.perf_counter() - w) / n, (time.process_time() - c) / n
            best = min(best, (wall, cpu))
        return best

    def per_request(self, mean_batch: float) -> tuple[float, float]:
        """(wall, CPU) seconds per request at a mean batch (interpolated between the two whole batches)."""
        lo = max(1, int(mean_batch))
        hi = lo + 1 if mean_batch > lo else lo
        for b in {lo, hi}:
            if b not in self.cache:
                self.cache[b] = self.per_batch(b)
        f = mean_batch - lo if hi != lo else 0.0
        wall = (1 - f) * self.cache[lo][0] / lo + f * self.cache[hi][0] / hi
        cpu = (1 - f) * self.cache[lo][1] / lo + f * self.cache[hi][1] / hi
        return wall, cpu


@dataclass
class Row:
    server: str
    protocol: str
    conc: int
    rate: float
    cpu_per_req: float  # server CPU seconds per request
    mean_batch: float
    server_total: float  # the server's own time per request (statistics' success ns), seconds
    server_compute: float  # the server's compute_infer per request, seconds
    ort_wall: float  # onnxruntime per request at mean_batch
    ort_cpu: float
    p50: float  # median latency, seconds

    @property
    def latency(self) -> float:
        return self.conc / self.rate


def run_rows(
    server: servers.Server, name: str, args: argparse.Namespace, work: Path, compute: Compute, x: np.ndarray
) -> list[Row]:
    rows: list[Row] = []
    null = name.startswith("null")
    server.start(None if null else "/v2/health/ready")
    try:
        for protocol in args.protocols.split(","):
            port = server.grpc_port if protocol == "grpc" else server.http_port
            if port is None:  # a null stack serves one protocol
                continue
            req = wire.build_request(protocol, MODEL, x)
            why, answer = wire.check(port, req, None)
            if why:
                raise RuntimeError(f"{name} {protocol}: {why}")
            for conc in (int(c) for c in args.concurrency.split(",")):
                run = load.run_h2load if protocol == "grpc" else load.run_wrk
                kw = {"answer_bytes": answer} if protocol == "grpc" else {}
                run(port, req, conc, 1, work, None, **kw)  # warm-up
                for _ in range(args.repeat):
                    before = Stats() if null else read_stats(server.http_port or 0)
                    t0, c0 = time.monotonic(), load.tree_cpu_seconds(server.pid)
                    result = run(port, req, conc, args.seconds, work, None, **kw)
                    cpu_s, wall = load.tree_cpu_seconds(server.pid) - c0, time.monotonic() - t0
                    if null:  # no statistics, no model: what the load generator counted
                        d = Stats(round(result.rate * wall), round(result.rate * wall))
                        ort_wall = ort_cpu = 0.0
                    else:
                        d = read_stats(server.http_port or 0) - before
                    mean_batch = d.inferences / max(1, d.executions)
                    if not null:
                        ort_wall, ort_cpu = compute.per_request(mean_batch)
                    # requests served in the window: the stats count them exactly
                    done = max(1, d.inferences)
                    row = Row(
                        name,
                        protocol,
                        conc,
                        result.rate,
                        cpu_s / done,
                        mean_batch,
                        d.success_ns / 1e9 / done,
                        d.compute_infer_ns / 1e9 / done,
                        ort_wall,
                        ort_cpu,
                        result.p50_ms / 1e3,
                    )
                    rows.append(row)
                    print(
                        f"[{time.strftime('%H:%M:%S')}] {name} {protocol} c={conc}: {result.rate:,.0f}/s "
                        f"batch {mean_batch:.1f} ({wall:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        server.stop()
    return rows


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def render(rows: list[Row], max_batch: int, compute: Compute) -> str:
    us = 1e6
    head = (
        f"{'server':<8} {'proto':<11} {'c':>3} {'infer/s':>8} {'lat us':>7} {'p50 us':>7} {'cpu us/req':>10} "
        f"{'batch':>6} {'srv total us':>12} {'srv compute us':>14} {'ort wall us/req':>15} {'ort cpu us/req':>14} "
        f"{'vs triton':>9} {'ceiling':>8} {'w/ null':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        same = [t for t in rows if t.protocol == r.protocol and t.conc == r.conc]
        tri = [t.rate for t in same if t.server == "triton"]
        # the cheapest null stack at this concurrency (grpc.aio costs more than inferd's own gRPC)
        floor = min(
            (
                _median([n.cpu_per_req for n in rows if n.server == "null" and n.conc == r.conc and n.protocol == p])
                for p in {n.protocol for n in rows if n.server == "null" and n.conc == r.conc}
            ),
            default=None,
        )
        vs = f"{r.rate / _median(tri):.2f}x" if tri else ""
        ceiling = with_null = ""
        if r.server == "triton":
            # Each request costs at least the model's CPU (+ a server's that does nothing): at c=1 on a
            # quiet machine latency follows CPU on the request's path, at c>1 throughput is cores / CPU.
            ceiling = f"{r.cpu_per_req / r.ort_cpu:.2f}x"
            if floor is not None:
                with_null = f"{r.cpu_per_req / (r.ort_cpu + floor):.2f}x"
        lines.append(
            f"{r.server:<8} {r.protocol:<11} {r.conc:>3} {r.rate:>8,.0f} {r.latency * us:>7.0f} {r.p50 * us:>7.0f} "
            f"{r.cpu_per_req * us:>10.0f} {r.mean_batch:>6.1f} {r.server_total * us:>12.0f} "
            f"{r.server_compute * us:>14.0f} {r.ort_wall * us:>15.0f} {r.ort_cpu * us:>14.0f} {vs:>9} "
            f"{ceiling:>8} {with_null:>8}"
        )
    lines.append(
        f"at batch {max_batch} onnxruntime needs {compute.per_request(max_batch)[1] * us:.0f} us CPU per request "
        "(the c>1 ceiling if a server batched everything)"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--protocols", default="http-binary,grpc")
    p.add_argument("--concurrency", default="1,64")
    p.add_argument("--servers", default="triton,inferd,null", help="triton, inferd, null (default all)")
    p.add_argument("--seconds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--triton-dir", type=Path, default=Path("/work/shared/triton"))
    args = p.parse_args(argv)
    load.check_tools()
    cores = len(os.sched_getaffinity(0))
    threads = max(1, cores // args.instances)
    with tempfile.TemporaryDirectory(prefix="inferd-mlp-ceiling-") as tmp:
        work = Path(tmp)
        models = generate(["mlp"], work)
        inferd_repo, triton_repo = write_repositories(models, work, args.max_batch_size, args.instances, threads)
        compute = Compute(models["mlp"].onnx_path, threads)
        x = models["mlp"].sample_input()
        rows: list[Row] = []
        for name in args.servers.split(","):
            if name == "triton":
                todo = [servers.triton(triton_repo, args.triton_dir, work)]
            elif name == "inferd":
                todo = [servers.inferd(inferd_repo, None, None, work)]
            elif name == "null":
                todo = [servers.null_http("uvloop", work), servers.null_grpc(work)]
            else:
                raise SystemExit(f"--servers: unknown {name!r} (triton, inferd, null)")
            for server in todo:
                rows += run_rows(server, name, args, work, compute, x)
        print(
            f"\nmlp_batched: {cores} cores, {args.instances} instances x intra_op_threads={threads} in both servers; "
            f"inferd with default flags; {args.seconds} s x {args.repeat} per row"
        )
        print(render(rows, args.max_batch_size, compute))
        print(
            "lat: c / throughput; cpu us/req: server CPU (all its processes) per request; batch: inference_count "
            "/ execution_count; srv total / srv compute: the server's own time per request (statistics: "
            "success, compute_infer; a batch's time counts for each of its requests); ort: session.run in this "
            "process at that batch, per request; ceiling (Triton rows): the most any server can beat that "
            "Triton row by: Triton's CPU per request / ort CPU per request at Triton's batch (CPU, not wall: a "
            "shared machine stretches wall times); w/ null: the same with the cheapest null stack's CPU per "
            "request at that concurrency added to the model's (a Python server that does nothing but answer)."
        )
        print(f"onnxruntime {ort.__version__}; batch -> (wall us, cpu us) per run: ", end="")
        print(", ".join(f"{b}: ({w * 1e6:.0f}, {c * 1e6:.0f})" for b, (w, c) in sorted(compute.cache.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
