"""Isolated Python models: inferd in-process vs inferd ``EXECUTION_MODE: process`` vs Triton's stub.

Serves one ``add_sub`` model.py (FP32 [4] + [4] -> sum, difference; and a [N] variant for a large
tensor) three ways from one run: inferd running it in the server process, inferd running it in a
stub process of its own, and the real Triton 2.51 (``../shared/triton``), whose python backend
always runs a stub process. For each it times the model's load (repository API, explicit mode),
then batch-1 HTTP requests (binary tensors, one keep-alive connection per client thread):
latency at concurrency 1 (p50/p99) and throughput at concurrency 8. The "overhead" column is the
p50 minus inferd in-process's: what the process boundary costs a request. "backend µs" is what the
server itself reports (statistics API: compute input + infer + output per execution, at
concurrency 1): the model's ``execute`` and, for a stub, the round trip to it, without the
frontend. "execute µs" is the time the model.py measures in its own ``execute`` body
(``time.perf_counter_ns``; it reports it as two pb_utils custom counters, ns and calls, flushed every
50 ms, which both servers export on ``/metrics``), and "stub µs" is backend µs minus execute µs: what
the server and its stub spend around the model's code, the same subtraction on every server, whatever
the speed of their HTTP frontends or of their pb_utils. "CPU µs/inf" is
the CPU time (user + system) the server's processes (its stubs included) spent per inference: a
measure a busy machine disturbs less than wall-clock times. All servers run at once and take
turns, ``--rounds`` times: the noise of a shared machine falls on each of them alike; each cell
is the median over the rounds, with their range. Prints numbers; asserts nothing.

    .venv/bin/python benchmarks/python_isolation.py                   # ~2 minutes
    .venv/bin/python benchmarks/python_isolation.py --seconds 5 --rounds 5 --servers inferd
    .venv/bin/python benchmarks/python_isolation.py --baseline /tmp/main   # + both modes from that source tree
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]

MODEL_PY = """
import time

import triton_python_backend_utils as pb_utils

FLUSH_NS = 50_000_000


class TritonPythonModel:
    def initialize(self, args):
        name = args["model_name"]
        labels = {"model": name}
        # the families are kept: Triton refuses updates of a metric whose family was collected
        self.families = (
            pb_utils.MetricFamily(name=f"{name}_execute_ns", description="ns in the body of execute",
                                  kind=pb_utils.MetricFamily.COUNTER),
            pb_utils.MetricFamily(name=f"{name}_executions", description="calls of execute",
                                  kind=pb_utils.MetricFamily.COUNTER),
        )
        self.ns_metric, self.count_metric = (family.Metric(labels=labels) for family in self.families)
        self.ns = self.count = 0
        self.flushed = time.perf_counter_ns()

    def execute(self, requests):
        started = time.perf_counter_ns()
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        now = time.perf_counter_ns()
        self.ns += now - started
        self.count += 1
        if now - self.flushed >= FLUSH_NS:  # Triton's stub waits for the server on each metric update: seldom
            self.ns_metric.increment(self.ns)
            self.count_metric.increment(self.count)
            self.ns = self.count = 0
            self.flushed = now
        return out
"""
CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {n} ] }}, {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {n} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {n} ] }}, {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {n} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
{extra}
"""
PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }'
#: (model name suffix, elements per input)
SIZES = {"small": 4, "large": 256 * 1024}


def write_repo(root: Path, process: bool) -> None:
    for suffix, n in SIZES.items():
        d = root / f"add_sub_{suffix}"
        (d / "1").mkdir(parents=True)
        (d / "config.pbtxt").write_text(CONFIG.format(n=n, extra=PROCESS if process else ""))
        (d / "1" / "model.py").write_text(MODEL_PY)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Server:
    def __init__(
        self, label: str, command: list[str], port: int, metrics_port: int, env: dict[str, str] | None = None
    ) -> None:
        self.label = label
        self.port = port
        self.metrics_port = metrics_port
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - the server writes to it for as long as it runs
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while not self._get("/v2/health/live"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise SystemExit(f"{label} did not start:\n{self.log.read().decode()[-3000:]}")
            time.sleep(0.1)

    def _get(self, path: str) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", path)
            return conn.getresponse().status == 200
        except OSError:
            return False

    def load(self, model: str) -> float:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        started = time.perf_counter()
        conn.request("POST", f"/v2/repository/models/{model}/load", body=b"{}")
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"{self.label}: loading {model} failed: {body.decode()}")
        return time.perf_counter() - started

    def backend_ns(self, model: str) -> tuple[int, int]:
        """(executions, ns spent in the backend: compute input + infer + output) from the statistics API."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", f"/v2/models/{model}/stats")
        stats = json.loads(conn.getresponse().read())["model_stats"][0]["inference_stats"]
        ns = sum(int(stats[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output"))
        return int(stats["compute_infer"]["count"]), ns

    def execute_ns(self, model: str) -> tuple[float, float]:
        """(executions, ns in the body of ``execute``) as the model.py counts them itself, from ``/metrics``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=30)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        wanted = (f"{model}_execute_ns", f"{model}_executions")
        values = {
            family.name: sample.value
            for family in text_string_to_metric_families(text)
            if family.name in wanted
            for sample in family.samples
            if sample.labels.get("model") == model
        }
        return values.get(wanted[1], 0.0), values.get(wanted[0], 0.0)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def infer_body(n: int) -> tuple[bytes, dict[str, str], np.ndarray]:
    a = np.arange(n, dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {"name": name, "shape": [n], "datatype": "FP32", "parameters": {"binary_data_size": a.nbytes}}
                for name in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + a.tobytes() * 2
    return (
        body,
        {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
        a * 2,
    )


def run_client(port: int, model: str, n: int, until: float, latencies: list[float], errors: list[str]) -> None:
    body, headers, expected = infer_body(n)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    path = f"/v2/models/{model}/infer"
    checked = False
    while time.perf_counter() < until:
        started = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        latencies.append(time.perf_counter() - started)
        if response.status != 200:
            errors.append(data[:200].decode(errors="replace"))
        elif not checked:
            size = int(response.getheader("Inference-Header-Content-Length"))
            got = np.frombuffer(data[size:], np.float32)
            if not np.array_equal(got, expected):
                errors.append("wrong answer")
            checked = True


def measure(port: int, model: str, n: int, concurrency: int, seconds: float) -> tuple[list[float], int, list[str]]:
    run_client(port, model, n, time.perf_counter() + 0.5, [], [])  # warm up
    until = time.perf_counter() + seconds
    per_thread: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[str] = []
    threads = [threading.Thread(target=run_client, args=(port, model, n, until, lat, errors)) for lat in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = [x for lat in per_thread for x in lat]
    return latencies, len(latencies), errors


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (a stub process, Triton's start script's server and its stubs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` so far."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def spread(values: list[float]) -> str:
    """The median, and the range when there is more than one value: ``540 (510-620)``."""
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="length of each timed run (default 3)")
    p.add_argument("--rounds", type=int, default=3, help="timed runs per server, model and concurrency (default 3)")
    p.add_argument("--servers", default="inferd,triton", help="inferd, triton (default both)")
    p.add_argument("--triton-dir", type=Path, default=Path("/work/shared/triton"))
    p.add_argument(
        "--baseline",
        type=Path,
        help="also run both modes from this inferd source tree (its core/src and "
        "plugins/*/src first on PYTHONPATH), in the same rounds: a change against the code before it",
    )
    args = p.parse_args(argv)
    servers = [s.strip() for s in args.servers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="inferd-bench-iso-"))
    setups = []
    if "inferd" in servers:
        setups += [("inferd in-process", False), ("inferd process", True)]
    if args.baseline is not None:
        setups += [("baseline in-process", False), ("baseline process", True)]
    if "triton" in servers:
        setups.append(("triton stub", None))
    running: list[Server] = []
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        for label, process in setups:
            repo = tmp / label.replace(" ", "_")
            write_repo(repo, bool(process))
            http_port, grpc_port, metrics_port = free_ports(3)
            if process is None:
                server = Server(
                    label,
                    [
                        "bash",
                        str(args.triton_dir / "start.sh"),
                        str(repo),
                        str(http_port),
                        str(grpc_port),
                        str(metrics_port),
                        "--model-control-mode=explicit",
                    ],
                    http_port,
                    metrics_port,
                )
            else:
                env = None
                if label.startswith("baseline"):
                    tree = args.baseline.resolve()
                    paths = [tree / "core" / "src", *sorted((tree / "plugins").glob("*/src"))]
                    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in paths)}
                server = Server(
                    label,
                    [
                        sys.executable,
                        "-m",
                        "inferd.host.cli",
                        "serve",
                        "--model-repository",
                        str(repo),
                        "--http-port",
                        str(http_port),
                        "--grpc-port",
                        str(grpc_port),
                        "--metrics-port",
                        str(metrics_port),
                        "--model-control-mode",
                        "explicit",
                    ],
                    http_port,
                    metrics_port,
                    env,
                )
            running.append(server)
            for suffix in SIZES:
                rows[(label, suffix)] = {
                    "load_ms": server.load(f"add_sub_{suffix}") * 1000,
                    "backend_us": [],
                    "execute_us": [],
                    "stub_us": [],
                    "p50_us": [],
                    "p99_us": [],
                    "c1_rps": [],
                    "c8_rps": [],
                    "cpu1_us": [],
                    "cpu8_us": [],
                    "errors": 0,
                    "error": [],
                }
        # the servers take turns, round after round: a busy machine's noise falls on all of them alike
        for round_ in range(args.rounds):
            for server in running:
                pids = process_tree(server.proc.pid)
                for suffix, n in SIZES.items():
                    model, row = f"add_sub_{suffix}", rows[(server.label, suffix)]
                    before, cpu0 = server.backend_ns(model), cpu_seconds(pids)
                    body0 = server.execute_ns(model)
                    lat1, count1, err1 = measure(server.port, model, n, 1, args.seconds)
                    after, cpu1 = server.backend_ns(model), cpu_seconds(pids)
                    body1 = server.execute_ns(model)
                    lat8, count8, err8 = measure(server.port, model, n, 8, args.seconds)
                    cpu8 = cpu_seconds(pids)
                    backend_us = (after[1] - before[1]) / max(1, after[0] - before[0]) / 1000
                    execute_us = (body1[1] - body0[1]) / max(1, body1[0] - body0[0]) / 1000
                    row["backend_us"].append(backend_us)
                    row["execute_us"].append(execute_us)
                    row["stub_us"].append(backend_us - execute_us)
                    row["p50_us"].append(percentile(lat1, 0.5) * 1e6)
                    row["p99_us"].append(percentile(lat1, 0.99) * 1e6)
                    row["c1_rps"].append(count1 / args.seconds)
                    row["c8_rps"].append(count8 / args.seconds)
                    row["cpu1_us"].append((cpu1 - cpu0) / max(1, count1) * 1e6)
                    row["cpu8_us"].append((cpu8 - cpu1) / max(1, count8) * 1e6)
                    row["errors"] += len(err1) + len(err8)
                    row["error"] = row["error"] or (err1 + err8)[:1]
            print(f"  round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    finally:
        for server in running:
            server.stop()
    base = {
        suffix: statistics.median(r["p50_us"]) for (label, suffix), r in rows.items() if label == "inferd in-process"
    }
    print(
        f"\ncores: {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds of "
        f"{args.seconds:g} s per run, HTTP binary tensors, batch 1; median (min-max) over the rounds\n"
    )
    columns = (
        "load ms",
        "backend µs",
        "execute µs",
        "stub µs",
        "p50 µs",
        "p99 µs",
        "overhead µs",
        "c=1 inf/s",
        "c=8 inf/s",
        "CPU µs/inf c=1",
        "c=8",
    )
    widths = (8, 16, 14, 14, 16, 18, 11, 16, 16, 16, 12)
    print(
        f"{'server':18} {'model':20} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)) + " errors"
    )
    for (label, suffix), r in rows.items():
        n = SIZES[suffix]
        model = f"{suffix} ({n * 4 * 2 // 1024} KiB in)" if n > 4 else "small (32 B in)"
        overhead = statistics.median(r["p50_us"]) - base[suffix] if suffix in base else float("nan")
        cells = (
            f"{r['load_ms']:.0f}",
            spread(r["backend_us"]),
            spread(r["execute_us"]),
            spread(r["stub_us"]),
            spread(r["p50_us"]),
            spread(r["p99_us"]),
            f"{overhead:.0f}",
            spread(r["c1_rps"]),
            spread(r["c8_rps"]),
            spread(r["cpu1_us"]),
            spread(r["cpu8_us"]),
        )
        print(
            f"{label:18} {model:20} "
            + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
            + f" {r['errors']:6d} {' '.join(r['error'])}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
