"""Start-up time and concurrency-1 latency of the simplest example model, over HTTP and gRPC.

Prints numbers; asserts nothing. Reproduce with:

    .venv/bin/python benchmarks/latency.py [--requests 2000] [--repository examples/models]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess

ROOT = Path(__file__).resolve().parents[1]


def measure(call, n: int) -> list[float]:
    for _ in range(min(100, n)):  # warm up
        call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return times


def report(name: str, times: list[float]) -> None:
    ms = sorted(t * 1000 for t in times)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    print(
        f"{name:<28} n={len(ms):<6} mean {statistics.fmean(ms):6.3f} ms  p50 {p(0.5):6.3f}  p90 {p(0.9):6.3f}  p99 {p(0.99):6.3f}  ({1000 / statistics.fmean(ms):7.0f} req/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repository", type=Path, default=ROOT / "examples" / "models")
    parser.add_argument("--model", default="add_sub")
    args = parser.parse_args()

    t0 = time.perf_counter()
    server = ServerProcess([args.repository], log_path=Path("/tmp/inferd-bench.log")).start()
    startup = time.perf_counter() - t0
    print(f"command: .venv/bin/python benchmarks/latency.py --requests {args.requests}")
    print(f"start-up (process start to /v2/health/ready = 200) with {args.repository.name}: {startup:.2f} s")
    try:
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        http = httpclient.InferenceServerClient(server.http_url)
        h_inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        for i in h_inputs:
            i.set_data_from_numpy(a, binary_data=True)
        h_out = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ]
        report(
            "HTTP  binary, concurrency 1",
            measure(lambda: http.infer(args.model, h_inputs, outputs=h_out), args.requests),
        )
        j_inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        for i in j_inputs:
            i.set_data_from_numpy(a, binary_data=False)
        j_out = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
        ]
        report(
            "HTTP  JSON,   concurrency 1",
            measure(lambda: http.infer(args.model, j_inputs, outputs=j_out), args.requests),
        )
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        g_inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"), grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
        for i in g_inputs:
            i.set_data_from_numpy(a)
        report("gRPC  raw,    concurrency 1", measure(lambda: grpc.infer(args.model, g_inputs), args.requests))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
