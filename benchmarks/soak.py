"""Memory under sustained load: RSS of an idle server, then its growth over a long run at c=64.

Starts ``inferd serve`` on the example repository (``examples/models``) and on vs_triton.py's
``tiny_batched`` ONNX model, reports the idle RSS of each serving process, then drives
``tiny_batched`` with ``wrk -t1 -c64`` (binary requests, as vs_triton.py) for ``--minutes``,
sampling every serving process's RSS between runs of ``--slice`` seconds. It prints the samples and
the growth from the first sample under load to the last (the first slice warms caches and arenas).

    .venv/bin/python benchmarks/soak.py --minutes 10 [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_bench import load, models, wire

ROOT = Path(__file__).resolve().parents[1]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _serving(pid: int) -> list[int]:
    """The serving processes: the server itself, or its workers under ``--workers N``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children] or [pid]


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"inferd serve exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("inferd serve did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--slice", type=float, default=30.0, help="seconds of load between RSS samples")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--port", type=int, default=28100)
    args = parser.parse_args()
    load.check_tools()
    inferd = shutil.which("inferd", path=str(Path(sys.executable).parent)) or "inferd"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        generated = models.generate(["tiny"], work)
        models.write_repositories(generated, work, 64, 2, 1)
        cmd = [
            inferd,
            "serve",
            "--model-repository",
            str(ROOT / "examples" / "models"),
            "--model-repository",
            str(work / "inferd-models"),
            "--http-address",
            "127.0.0.1",
            "--http-port",
            str(args.port),
            "--grpc-port",
            str(args.port + 1),
            "--metrics-port",
            str(args.port + 2),
            "--allow-openai=false",
            "--workers",
            str(args.workers),
        ]
        with open(work / "server.log", "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_ready(args.port, proc)
            time.sleep(2)
            idle = [_rss_mib(p) for p in _serving(proc.pid)]
            print(f"idle RSS per serving process (MiB): {', '.join(f'{r:.0f}' for r in idle)}", flush=True)
            request = wire.build_request("http-binary", "tiny_batched", generated["tiny"].sample_input())
            samples: list[list[float]] = []
            deadline = time.monotonic() + args.minutes * 60
            while time.monotonic() < deadline:
                result = load.run_wrk(args.port, request, 64, args.slice, work, proc.pid)
                samples.append([_rss_mib(p) for p in _serving(proc.pid)])
                print(
                    f"{len(samples) * args.slice:6.0f} s  {result.rate:8,.0f} infer/s  errors {result.errors} {result.note}  "
                    f"RSS (MiB): {', '.join(f'{r:.1f}' for r in samples[-1])}",
                    flush=True,
                )
            if len(samples) > 1:
                growth = [last - first for first, last in zip(samples[0], samples[-1], strict=True)]
                print(
                    f"growth from the first sample under load to the last (MiB): {', '.join(f'{g:+.1f}' for g in growth)}"
                )
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
