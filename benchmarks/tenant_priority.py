"""Two tenants flooding one model: the high-priority tenant's p99 stays near its unloaded p99
while the low-priority tenant absorbs the queueing (docs/traffic.md, "Tenant priorities").

One server, one model (a Python model that sleeps ``--service-ms`` per request; ``--instances``
instances behind the dynamic batcher, batch size 1), and ``--auth-config`` with two tenants:
``interactive`` (priority 1) and ``batch`` (priority 2). Each tenant's p99 is measured alone
alone with its clients (unloaded: ``--interactive-clients`` and ``--batch-clients`` closed-loop
clients, each in its own process; the interactive ones pause a random 0 to 2 service times between
requests, the batch ones flood), then with both tenants' clients at once (loaded). The same load is run again with both tenants at priority 1 (the auth
config is re-read live), to show what the priority buys. It prints numbers only. Reproduce with:

    .venv/bin/python benchmarks/tenant_priority.py --seconds 5

The target: interactive's loaded p99 within 2x of its unloaded p99, batch's grows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from inferd.testing import ServerProcess, write_repository

MODEL_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.seconds = {service_ms} / 1000

    def execute(self, requests):
        time.sleep(self.seconds * len(requests))
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())]) for r in requests]
"""
CONFIG = """
name: "work"
backend: "python"
max_batch_size: 1
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
dynamic_batching {{ }}
"""
#: One closed-loop client: sends requests for ``seconds``, pausing a random 0..``think`` seconds
#: after each answer, prints its latencies (JSON, seconds).
CLIENT = """
import http.client, json, random, sys, time
address, key, seconds, start, think = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
body = json.dumps({"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]})
headers = {"Authorization": "Bearer " + key}
conn = http.client.HTTPConnection(address, timeout=60)
while time.time() < start:
    time.sleep(0.001)
end, times = time.monotonic() + seconds, []
while time.monotonic() < end:
    t0 = time.perf_counter()
    conn.request("POST", "/v2/models/work/infer", body, headers)
    response = conn.getresponse()
    response.read()
    if response.status == 200:
        times.append(time.perf_counter() - t0)
    if think:
        time.sleep(random.uniform(0, think))
print(json.dumps(times))
"""


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def auth(interactive: int, batch: int) -> str:
    return json.dumps(
        {
            "tenants": {
                "interactive": {"keys": [sha("interactive-key")], "priority": interactive},
                "batch": {"keys": [sha("batch-key")], "priority": batch},
            }
        }
    )


def run(server: ServerProcess, clients: dict[str, int], seconds: float, think: float = 0.0) -> dict[str, list[float]]:
    """Start ``clients[key]`` closed-loop clients per key at once; their latencies by key. The
    interactive clients pause up to ``think`` seconds between requests (arriving at random
    moments, not just as an instance frees); the batch clients flood."""
    start = time.time() + 1.0  # every process started before any sends
    procs = [
        (
            key,
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    CLIENT,
                    server.http_url,
                    key,
                    str(seconds),
                    str(start),
                    str(think if key == "interactive-key" else 0.0),
                ],
                stdout=subprocess.PIPE,
                text=True,
            ),
        )
        for key, count in clients.items()
        for _ in range(count)
    ]
    out: dict[str, list[float]] = {key: [] for key in clients}
    for key, proc in procs:
        stdout, _ = proc.communicate(timeout=seconds + 60)
        out[key] += json.loads(stdout)
    return out


def set_priorities(path: Path, server: ServerProcess, interactive: int, batch: int) -> None:
    """Write the auth config and wait until the server has read it (looked at once a second)."""
    path.write_text(auth(interactive, batch))
    time.sleep(1.5)
    run(server, {"interactive-key": 1}, 0.2)


def quantile(times: list[float], q: int) -> float:
    """The ``q``-th percentile of ``times``, in milliseconds."""
    return statistics.quantiles(times, n=100)[q - 1] * 1000 if len(times) >= 2 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--service-ms", type=float, default=10.0, help="the model's time per request")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the phases; medians are printed")
    parser.add_argument("--interactive-clients", type=int, default=2, help="closed-loop clients of interactive")
    parser.add_argument("--batch-clients", type=int, default=4, help="closed-loop clients of batch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = {
            "config.pbtxt": CONFIG.format(instances=args.instances),
            "1/model.py": MODEL_PY.format(service_ms=args.service_ms),
        }
        repo = write_repository(root / "models", {"work": model})
        (root / "auth.json").write_text(auth(1, 2))
        with ServerProcess([repo], [f"--auth-config={root / 'auth.json'}"]) as server:
            run(server, {"interactive-key": 1}, 1.0)  # warm up
            both = {"interactive-key": args.interactive_clients, "batch-key": args.batch_clients}
            think = 2 * args.service_ms / 1000
            rounds: dict[str, dict[str, list[list[float]]]] = {"unloaded": {}, "loaded": {}, "equal": {}}
            for _ in range(args.rounds):  # the median of the rounds: the machine may be busy with other work
                for key, count in both.items():
                    rounds["unloaded"].setdefault(key, []).append(run(server, {key: count}, args.seconds, think)[key])
                for key, times in run(server, both, args.seconds, think).items():
                    rounds["loaded"].setdefault(key, []).append(times)
                set_priorities(root / "auth.json", server, 1, 1)  # the same load, no priority between them
                for key, times in run(server, both, args.seconds, think).items():
                    rounds["equal"].setdefault(key, []).append(times)
                set_priorities(root / "auth.json", server, 1, 2)
    table = {
        (phase, key, q): statistics.median(quantile(times, q) for times in runs)
        for phase, by_key in rounds.items()
        for key, runs in by_key.items()
        for q in (50, 99)
    }
    print(
        f"model: {args.instances} instance(s), {args.service_ms:g} ms a request; closed-loop clients: "
        f"{args.interactive_clients} interactive, {args.batch_clients} batch; {args.seconds:g} s a phase; "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'tenant':<22}{'':>5}{'unloaded ms':>13}{'loaded ms':>11}{'ratio':>7}{'same priority ms':>18}")
    for key, label in (("interactive-key", "interactive (prio 1)"), ("batch-key", "batch (prio 2)")):
        for q in (50, 99):
            unloaded, loaded, equal = (table[phase, key, q] for phase in ("unloaded", "loaded", "equal"))
            print(
                f"{label:<22}{'p' + str(q):>5}{unloaded:>13.1f}{loaded:>11.1f}{loaded / unloaded:>7.2f}{equal:>18.1f}"
            )


if __name__ == "__main__":
    main()
