"""Dynamic batching on and off for the MLP ONNX model, at several concurrencies.

One server serves the same MLP twice: ``mlp_direct`` (no batching) and ``mlp_dynamic``
(``dynamic_batching``, max_batch_size 64). Concurrent gRPC clients (asyncio, batch-1 requests)
keep N requests in flight for a fixed time; the script prints inferences per second and
p50/p99 latency. It prints numbers only. Reproduce with:

    .venv/bin/python benchmarks/batching.py --seconds 5 --concurrency 16,64
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import InferInput

from inferd.testing import ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_mlp import IN, OUT, build_mlp

CONFIG = """
backend: "onnxruntime"
max_batch_size: {mbs}
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {inp} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {out} ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{batching}
"""


def write_repository(root: Path, delay_us: int, instances: int) -> Path:
    for name, batching in (("mlp_direct", ""), ("mlp_dynamic", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}")):
        d = root / name
        build_mlp(d / "1" / "model.onnx")
        (d / "config.pbtxt").write_text(CONFIG.format(mbs=64, inp=IN, out=OUT, instances=instances, batching=batching))
    return root


async def run_level(url: str, model: str, concurrency: int, seconds: float) -> tuple[float, list[float]]:
    client = grpcaio.InferenceServerClient(url)
    x = np.random.default_rng(0).standard_normal((1, IN), dtype=np.float32)
    inp = InferInput("INPUT", [1, IN], "FP32")
    inp.set_data_from_numpy(x)
    latencies: list[float] = []
    stop_at = 0.0

    async def caller(record: bool) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await client.infer(model, [inp])
            if record:
                latencies.append(time.perf_counter() - t0)

    stop_at = time.perf_counter() + 1.0  # warm-up
    await asyncio.gather(*(caller(False) for _ in range(concurrency)))
    start = time.perf_counter()
    stop_at = start + seconds
    await asyncio.gather(*(caller(True) for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    await client.close()
    return len(latencies) / elapsed, latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--delay-us", type=int, default=500, help="max_queue_delay_microseconds of mlp_dynamic")
    parser.add_argument("--instances", type=int, default=1)
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(Path(tmp) / "models", args.delay_us, args.instances)
        server = ServerProcess([repo], log_path=Path(tmp) / "inferd.log").start()
        try:
            print(f"command: .venv/bin/python benchmarks/batching.py --seconds {args.seconds} --concurrency {args.concurrency} "
                  f"--delay-us {args.delay_us} --instances {args.instances}")  # fmt: skip
            print(f"{'model':<12} {'concurrency':>11} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            for level in levels:
                for model in ("mlp_direct", "mlp_dynamic"):
                    rate, lat = asyncio.run(run_level(server.grpc_url, model, level, args.seconds))
                    ms = np.array(lat) * 1000
                    print(f"{model:<12} {level:>11} {rate:>9.0f} {np.percentile(ms, 50):>8.2f} {np.percentile(ms, 99):>8.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
