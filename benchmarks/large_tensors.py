"""Large tensors: inferd's gRPC transports and HTTP beside the real Triton 2.51, one Python identity model.

Serves one Python ``identity`` model (FP32 ``[-1]`` in, the same array out, a ``model.py`` both
servers run) from inferd with its default gRPC transport (``h2``), from inferd with
``--grpc-transport grpcio``, and from Triton 2.51 (``../shared/triton``), and drives them with the
official clients: tritonclient gRPC, and tritonclient HTTP (binary tensors) against inferd's and
Triton's HTTP ports. Each client is its own process (one channel or keep-alive connection each),
so the clients' GIL does not cap the servers; ``--concurrency`` of them send batch-1 requests
back to back for ``--seconds``. The first answer of each client is compared with what it sent.

The servers take turns, size after size, ``--rounds`` times (each other round in reverse order),
so a shared machine's noise falls on all of them alike; a cell is the median over the rounds and
the ratios are medians of same-round ratios. MB/s is infer/s times the tensor's size (each way).
Prints numbers; asserts nothing. The load generators share the cores with the servers.

    python benchmarks/large_tensors.py                                   # ~3 minutes
    python benchmarks/large_tensors.py --sizes 4M,16M --protocols grpc --rounds 3
    python benchmarks/large_tensors.py --baseline /tmp/base --servers inferd,triton   # before/after
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from triton_bench.load import tree_cpu_seconds  # noqa: E402
from triton_bench.servers import checkout_env  # noqa: E402
from triton_bench.servers import triton as triton_server  # noqa: E402

MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                                                            .as_numpy())]) for r in requests]
"""
CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: %d } ]
"""
UNITS = {"K": 1 << 10, "M": 1 << 20}


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def size_label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


# -- the clients: one process each -------------------------------------------------------------


def client_loop(conn: Any) -> None:
    """Runs in a child process: each command (protocol, url, bytes, seconds) -> (calls, error)."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    while True:
        command = conn.recv()
        if command is None:
            return
        protocol, url, size, seconds = command
        data = np.random.default_rng(size).random(size // 4, dtype=np.float32)
        error = ""
        calls = 0
        try:
            if protocol == "grpc":
                client: Any = grpcclient.InferenceServerClient(url)
                tensor: Any = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
                outputs = [grpcclient.InferRequestedOutput("OUTPUT0")]
            else:
                client = httpclient.InferenceServerClient(url, connection_timeout=120, network_timeout=120)
                tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
                outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
            tensor.set_data_from_numpy(data)
            got = client.infer("identity", [tensor], outputs=outputs).as_numpy("OUTPUT0")
            if not np.array_equal(got, data):
                error = "wrong answer"
            conn.send("ready")
            until = conn.recv()
            while time.monotonic() < until:
                client.infer("identity", [tensor], outputs=outputs)
                calls += 1
            client.close()
        except Exception as exc:  # reported in the table
            error = f"{type(exc).__name__}: {str(exc)[:160]}"
            conn.send("ready")
            conn.recv()
        conn.send((calls, error))


#: A client whose call takes this long is stuck: the run stops (calls carry no deadline: a
#: deadline would send inferd's calls down its slower path).
STUCK_SECONDS = 120.0


def _recv(pipe: Any, timeout: float, what: str) -> Any:
    if not pipe.poll(timeout):
        raise SystemExit(f"stopped: {what} in {timeout:.0f} s")
    return pipe.recv()


class Clients:
    """``n`` client processes, kept for the whole run."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.pipes = []
        self.procs = []
        for _ in range(n):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=client_loop, args=(child,), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def run(self, protocol: str, url: str, size: int, seconds: float) -> tuple[float, str]:
        """infer/s over all clients, and the first error any of them met."""
        for pipe in self.pipes:
            pipe.send((protocol, url, size, seconds))
        for pipe in self.pipes:
            _recv(pipe, STUCK_SECONDS, f"{url}: no answer to a first {size_label(size)} {protocol} call")
        started = time.monotonic()
        for pipe in self.pipes:
            pipe.send(started + seconds)
        results = [_recv(pipe, seconds + STUCK_SECONDS, f"{url}: {protocol} calls stuck") for pipe in self.pipes]
        elapsed = time.monotonic() - started
        errors = [error for _, error in results if error]
        return sum(calls for calls, _ in results) / elapsed, errors[0] if errors else ""

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


# -- the servers --------------------------------------------------------------------------------


@dataclass
class Target:
    """One server and protocol: a column of the table."""

    label: str
    protocol: str
    url: str
    pid: int  # the server's process: its CPU is its tree's (Triton's stubs, inferd's workers)
    rates: dict[int, list[float]] = field(default_factory=dict)  # size -> infer/s per round
    cpu: dict[int, list[float]] = field(default_factory=dict)  # size -> server CPU ms per infer
    errors: dict[int, str] = field(default_factory=dict)


def start_inferd(repo: Path, work: Path, label: str, args: list[str], env: dict[str, str] | None) -> Any:
    from inferd.testing.servers import ServerProcess

    server = ServerProcess(
        [repo], ["--grpc-max-message-bytes", str(1 << 30), *args], env, log_path=work / f"{label}.log"
    )
    return server.start(timeout=180)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4K,256K,4M,16M", help="tensor sizes, comma-separated (default 4K,256K,4M,16M)")
    p.add_argument("--protocols", default="grpc,http", help="grpc, http (default both)")
    p.add_argument(
        "--servers",
        default="inferd,grpcio,triton",
        help="inferd (default transport), grpcio (inferd --grpc-transport grpcio), triton",
    )
    p.add_argument("--concurrency", type=int, default=8, help="client processes (default 8)")
    p.add_argument("--seconds", type=float, default=3.0, help="length of each timed run (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="runs of every cell, servers in turn (default 2)")
    p.add_argument("--instances", type=int, default=1, help="instance_group count of the model (default 1)")
    p.add_argument("--triton-dir", type=Path, default=Path("/work/shared/triton"))
    p.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of inferd, served beside this one with the "
        "default transport (its sources first on PYTHONPATH): rows 'inferd@base'",
    )
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    protocols = [s.strip() for s in args.protocols.split(",")]
    servers = [s.strip() for s in args.servers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="inferd-bench-large-"))
    repo = work / "models"
    (repo / "identity" / "1").mkdir(parents=True)
    (repo / "identity" / "config.pbtxt").write_text(CONFIG % args.instances)
    (repo / "identity" / "1" / "model.py").write_text(MODEL_PY)

    started: list[Any] = []
    targets: list[Target] = []
    clients = Clients(args.concurrency)
    try:
        plan: list[tuple[str, list[str], dict[str, str] | None, bool]] = []
        if "inferd" in servers:
            plan.append(("inferd", [], None, True))
        if args.baseline is not None:
            plan.append(("inferd@base", [], checkout_env(args.baseline.resolve()), True))
        if "grpcio" in servers:
            plan.append(("inferd grpcio", ["--grpc-transport", "grpcio"], None, False))
        for label, extra, env, http_too in plan:
            server = start_inferd(repo, work, label.replace(" ", "-").replace("@", "-"), extra, env)
            started.append(server)
            pid = server.proc.pid
            if "grpc" in protocols:
                targets.append(Target(f"{label} gRPC", "grpc", server.grpc_url, pid))
            if "http" in protocols and http_too:
                targets.append(Target(f"{label} HTTP", "http", server.http_url, pid))
        if "triton" in servers:
            server = triton_server(repo, args.triton_dir, work).start("/v2/models/identity/ready")
            started.append(server)
            pid = server.pid
            if "grpc" in protocols:
                targets.append(Target("triton gRPC", "grpc", f"127.0.0.1:{server.grpc_port}", pid))
            if "http" in protocols:
                targets.append(Target("triton HTTP", "http", f"127.0.0.1:{server.http_port}", pid))

        for round_ in range(args.rounds):
            for size in sizes:
                for target in targets if round_ % 2 == 0 else targets[::-1]:
                    cpu0 = tree_cpu_seconds(target.pid)
                    rate, error = clients.run(target.protocol, target.url, size, args.seconds)
                    cpu = tree_cpu_seconds(target.pid) - cpu0
                    target.rates.setdefault(size, []).append(rate)
                    target.cpu.setdefault(size, []).append(cpu * 1000 / max(1.0, rate * args.seconds))
                    if error and size not in target.errors:
                        target.errors[size] = error
            print(f"  round {round_ + 1} of {args.rounds} done", file=sys.stderr)
    finally:
        clients.close()
        for server in started:
            server.stop()
    report(targets, sizes, args, argv)


def report(targets: list[Target], sizes: list[int], args: argparse.Namespace, argv: list[str]) -> None:
    """One table: infer/s, MB/s, server CPU per infer, and same-round ratios to Triton's same protocol."""
    by_label = {t.label: t for t in targets}
    print(
        f"\ncores: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.1f} at the end, "
        f"c={args.concurrency} client processes, {args.rounds} rounds of {args.seconds:g} s, Python identity model "
        f"(FP32, instances {args.instances}); median over the rounds; ratio: median of same-round ratios [range]\n"
    )
    print(f"{'size':>8}  {'server':22} {'infer/s':>9} {'MB/s':>8} {'CPU ms/inf':>11}  {'vs Triton':>20}  errors")
    for size in sizes:
        for target in targets:
            rates = target.rates.get(size, [])
            if not rates:
                continue
            rate = statistics.median(rates)
            mbps = rate * size / 1e6
            cpu = statistics.median(target.cpu[size])
            ratio = ""
            triton = by_label.get(f"triton {'gRPC' if target.protocol == 'grpc' else 'HTTP'}")
            if triton is not None and triton is not target and triton.rates.get(size):
                each = [a / b for a, b in zip(rates, triton.rates[size], strict=True) if b]
                if each:
                    ratio = f"{statistics.median(each):.2f}x [{min(each):.2f}-{max(each):.2f}]"
            print(
                f"{size_label(size):>8}  {target.label:22} {rate:9.0f} {mbps:8.0f} {cpu:11.2f}  {ratio:>20}  "
                f"{target.errors.get(size, '')}"
            )
        print()
    print("python benchmarks/large_tensors.py " + " ".join(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
