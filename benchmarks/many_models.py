"""More models than memory: the same repository served fully loaded, then loaded on demand under a
memory budget, with the same Zipf-distributed traffic over HTTP and gRPC (issue 36).

The repository holds ``--models`` Python models, each holding ``--megabytes`` of resident memory
(a numpy array written in ``initialize``). The on-demand server gets ``--model-load-on-demand``
and a budget for ``--holds`` of them. It prints, per setup: the server's peak and final resident
memory, warm p50/p99, cold-load p50/p99 (each load on demand, from the server's log), cold-request
p50/p99 (the slowest requests, as many as there were loads) and the hit rate. Numbers only.
Reproduce with:

    .venv/bin/python benchmarks/many_models.py --seconds 10 --models 16 --megabytes 16 --holds 4
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository

MB = 1 << 20

MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.id = int(parameters["id"]["string_value"])
        self.held = np.ones(int(parameters["megabytes"]["string_value"]) << 20, dtype=np.uint8)

    def execute(self, requests):
        out = pb_utils.Tensor("ID", np.array([self.id], dtype=np.int64))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [{{ name: "MS" data_type: TYPE_INT32 dims: [1] }}]
output [{{ name: "ID" data_type: TYPE_INT64 dims: [1] }}]
instance_group [{{ kind: KIND_CPU count: 1 }}]
parameters {{ key: "megabytes" value {{ string_value: "{mb}" }} }}
parameters {{ key: "id" value {{ string_value: "{i}" }} }}
"""


def _status(pid: int, field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def drive(srv: ServerProcess, models: int, seconds: float, zipf: float, seed: int) -> list[float]:
    """Zipf traffic from two clients (HTTP, gRPC) for ``seconds``; every request's latency (s)."""
    weights = [1 / (k + 1) ** zipf for k in range(models)]
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        rng = random.Random(seed + n)
        grpc = n % 2 == 1
        module = grpcclient if grpc else httpclient
        conn = module.InferenceServerClient(srv.grpc_url) if grpc else module.InferenceServerClient(srv.http_url)
        while time.monotonic() < stop:
            i = rng.choices(range(models), weights)[0]
            x = module.InferInput("MS", [1], "INT32")
            x.set_data_from_numpy(np.zeros(1, dtype=np.int32))
            started = time.perf_counter()
            try:
                got = int(conn.infer(f"m{i:03d}", [x]).as_numpy("ID")[0])
                assert got == i, f"m{i:03d} answered {got}"
            except Exception as exc:
                with lock:
                    failures.append(str(exc))
                continue
            with lock:
                latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        print(f"  {len(failures)} failed requests, first: {failures[0]}")
    return latencies


def run(repo: Path, flags: list[str], args: argparse.Namespace, label: str) -> None:
    with ServerProcess([repo], ["--workers", "1", *flags]) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        latencies = drive(srv, args.models, args.seconds, args.zipf, args.seed)
        peak, final = _status(pid, "VmHWM"), _status(pid, "VmRSS")
        log = srv.log()
    loads = [float(s) for s in re.findall(r"loaded on demand in ([\d.]+) s", log)]
    ordered = sorted(latencies)
    cold = ordered[len(ordered) - len(loads) :] if loads else []
    warm = ordered[: len(ordered) - len(loads)]

    def ms(values: list[float], q: float) -> str:
        return f"{np.percentile(values, q) * 1e3:7.1f}" if values else "      -"

    hit = 1 - len(loads) / len(latencies) if latencies else 0.0
    print(
        f"{label:<24} {peak / MB:8.0f} {final / MB:8.0f} {len(latencies):8d} {ms(warm, 50)} {ms(warm, 99)} "
        f"{ms(loads, 50)} {ms(loads, 99)} {ms(cold, 50)} {ms(cold, 99)} {hit:7.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--megabytes", type=int, default=16, help="resident memory each model holds")
    parser.add_argument("--holds", type=int, default=4, help="how many models the budget holds")
    parser.add_argument("--zipf", type=float, default=1.1, help="the Zipf exponent of the traffic")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="inferd-many-"))
    repo = write_repository(
        root / "models",
        {
            f"m{i:03d}": {"config.pbtxt": CONFIG.format(mb=args.megabytes, i=i), "1/model.py": MODEL}
            for i in range(args.models)
        },
    )
    budget = int((args.holds + 0.5) * args.megabytes * MB)
    print(
        f"{args.models} Python models x {args.megabytes} MiB, Zipf s={args.zipf}, {args.seconds:g} s, 2 clients "
        f"(HTTP, gRPC); budget {budget / MB:.0f} MiB (holds {args.holds})"
    )
    print(
        f"{'setup':<24} {'peak MiB':>8} {'end MiB':>8} {'requests':>8} {'warm50':>7} {'warm99':>7} "
        f"{'load50':>7} {'load99':>7} {'cold50':>7} {'cold99':>7} {'hit':>7}   (ms)"
    )
    run(repo, [], args, "fully loaded")
    run(repo, ["--model-load-on-demand=true", f"--model-memory-budget={budget}"], args, "on demand + budget")


if __name__ == "__main__":
    main()
