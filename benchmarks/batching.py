"""Dynamic batching on and off for the MLP ONNX model, at several concurrencies.

One server serves the same MLP twice: ``mlp_direct`` (no batching) and ``mlp_dynamic``
(``dynamic_batching``, max_batch_size 64). ``inferd perf`` keeps N batch-1 requests in flight
and reports inferences per second and p50/p99 latency. It prints numbers only. Reproduce with:

    .venv/bin/python benchmarks/batching.py --seconds 5 --concurrency 16,64
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

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
    for name, batching in (
        ("mlp_direct", ""),
        ("mlp_dynamic", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}"),
    ):
        d = root / name
        build_mlp(d / "1" / "model.onnx")
        (d / "config.pbtxt").write_text(CONFIG.format(mbs=64, inp=IN, out=OUT, instances=instances, batching=batching))
    return root


def run_level(
    url: str, protocol: str, model: str, concurrency: int, seconds: float, tmp: Path
) -> tuple[float, float, float]:
    """``inferd perf`` at one concurrency: (infer/s, p50 ms, p99 ms). Its load generator costs far
    less CPU per request than tritonclient, which matters when client and server share 2 cores."""
    csv_path = tmp / f"{model}-{protocol}-{concurrency}.csv"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "inferd.host.cli",
            "perf",
            "-m",
            model,
            "-i",
            protocol,
            "-u",
            url,
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            "-p",
            str(int(seconds * 1000)),
            "-r",
            "3",
            "-f",
            str(csv_path),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(csv_path) as f:
        row = next(csv.DictReader(f))
    return float(row["Inferences/Second"]), float(row["p50 latency"]) / 1000, float(row["p99 latency"]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="16,64")
    parser.add_argument("--delay-us", type=int, default=500, help="max_queue_delay_microseconds of mlp_dynamic")
    parser.add_argument("--instances", type=int, default=1)
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(Path(tmp) / "models", args.delay_us, args.instances)
        server = ServerProcess([repo], log_path=Path(tmp) / "inferd.log").start()
        try:
            print(
                f"command: .venv/bin/python benchmarks/batching.py --seconds {args.seconds} --concurrency {args.concurrency} "
                f"--delay-us {args.delay_us} --instances {args.instances} --protocol {args.protocol}"
            )
            url = server.http_url if args.protocol == "http" else server.grpc_url
            print(f"{'model':<12} {'concurrency':>11} {'infer/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
            for level in levels:
                for model in ("mlp_direct", "mlp_dynamic"):
                    rate, p50, p99 = run_level(url, args.protocol, model, level, args.seconds, Path(tmp))
                    print(f"{model:<12} {level:>11} {rate:>9.0f} {p50:>8.2f} {p99:>8.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
