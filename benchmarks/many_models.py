"""More models than memory: the same repository served fully loaded, then loaded on demand under a
memory budget, with the same Zipf-distributed traffic over HTTP and gRPC (issue 36).

The repository holds ``--models`` models, every other one ONNX (onnxruntime: a float32 initializer
of ``--megabytes`` read by a Gather) and the rest Python (a numpy array of ``--megabytes`` written
in ``initialize``). The on-demand server gets ``--model-load-on-demand`` and a budget for
``--holds`` of them. It prints, per setup and per backend: the server's peak and final resident
memory, the cores it kept busy (its and its children's CPU time over the traffic's wall time),
warm p50/p99, load p50/p99 (each load on demand, from the server's log), cold-request p50/p99
(requests during which a load of their model ended: they waited for it) and the hit rate
(requests that found their model loaded), and the latency of a probe asking the most requested
model (m000, loaded the whole time but its first load) every 10 ms beside the traffic: warm
latency while loads go on. ``--load-nice 0 --concurrency 1`` runs loads on demand as they ran
before ``--model-load-nice`` and ``--model-load-on-demand-concurrency``. Numbers only. Reproduce with:

    .venv/bin/python benchmarks/many_models.py --seconds 10 --models 40 --megabytes 32 --holds 8
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from triton_bench.load import tree_cpu_seconds

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

ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 0
input [{ name: "MS" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "ID" data_type: TYPE_INT64 dims: [1] }]
instance_group [{ kind: KIND_CPU count: 1 }]
"""


def onnx_model(ident: int, megabytes: int) -> bytes:
    """ID = W[MS] as INT64, W a float32 initializer of ``megabytes``, every element ``ident``."""
    w = numpy_helper.from_array(np.full(megabytes * MB // 4, ident, dtype=np.float32), "W")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["W", "MS"], ["G"]),
            helper.make_node("Cast", ["G"], ["ID"], to=TensorProto.INT64),
        ],
        "g",
        [helper.make_tensor_value_info("MS", TensorProto.INT32, [1])],
        [helper.make_tensor_value_info("ID", TensorProto.INT64, [1])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def backend(name: str) -> str:
    """Odd-numbered models are ONNX, even-numbered ones Python."""
    return "onnx" if int(name[1:]) % 2 else "python"


def _status(pid: int, field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


def loads_in(log: str) -> list[tuple[str, float, float]]:
    """(model, when its load on demand ended as a Unix time, how long it took in s) from the log."""
    year = datetime.now().year
    found = re.findall(r"^I(\d{4} \d\d:\d\d:\d\d\.\d+) .*model '(m\d+)' loaded on demand in ([\d.]+) s", log, re.M)
    return [
        (name, datetime.strptime(f"{year}{stamp}", "%Y%m%d %H:%M:%S.%f").timestamp(), float(took))
        for stamp, name, took in found
    ]


def drive(
    srv: ServerProcess, models: int, seconds: float, zipf: float, seed: int, clients: int = 4
) -> tuple[list[tuple[str, float, float]], list[tuple[str, float, float]]]:
    """Zipf traffic from ``clients`` clients (even: HTTP, odd: gRPC) for ``seconds``, and a probe: an
    HTTP client asking the most requested model (m000, which stays loaded) every 10 ms. Each
    request as (model, start as Unix time, latency s): the traffic's, the probe's."""
    weights = [1 / (k + 1) ** zipf for k in range(models)]
    done: list[tuple[str, float, float]] = []
    probed: list[tuple[str, float, float]] = []
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
            wall, started = time.time(), time.perf_counter()
            try:
                got = int(conn.infer(f"m{i:03d}", [x]).as_numpy("ID")[0])
                assert got == i, f"m{i:03d} answered {got}"
            except Exception as exc:
                with lock:
                    failures.append(str(exc))
                continue
            with lock:
                done.append((f"m{i:03d}", wall, time.perf_counter() - started))

    def probe() -> None:
        conn = httpclient.InferenceServerClient(srv.http_url, network_timeout=120)
        x = httpclient.InferInput("MS", [1], "INT32")
        x.set_data_from_numpy(np.zeros(1, dtype=np.int32))
        while time.monotonic() < stop:
            wall, started = time.time(), time.perf_counter()
            conn.infer("m000", [x])
            probed.append(("m000", wall, time.perf_counter() - started))
            time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    threads.append(threading.Thread(target=probe))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        print(f"  {len(failures)} failed requests, first: {failures[0]}")
    return done, probed


def _ms(values: list[float], q: float) -> str:
    return f"{np.percentile(values, q) * 1e3:7.1f}" if values else "      -"


def run(repo: Path, flags: list[str], args: argparse.Namespace, label: str) -> None:
    with ServerProcess([repo], ["--workers", "1", *flags]) as srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        cpu, wall = tree_cpu_seconds(pid), time.monotonic()
        done, probed = drive(srv, args.models, args.seconds, args.zipf, args.seed, args.clients)
        cores = (tree_cpu_seconds(pid) - cpu) / (time.monotonic() - wall)
        peak, final = _status(pid, "VmHWM"), _status(pid, "VmRSS")
    loads = loads_in(srv.log_path.read_text())
    ends: dict[str, list[float]] = {}
    for name, end, _ in loads:
        ends.setdefault(name, []).append(end)
    for which in ("all", "onnx", "python", "probe"):
        mine = probed if which == "probe" else [r for r in done if which in ("all", backend(r[0]))]
        cold_flags = [any(start <= e <= start + took for e in ends.get(name, ())) for name, start, took in mine]
        cold = [r[2] for r, c in zip(mine, cold_flags, strict=True) if c]
        warm = [r[2] for r, c in zip(mine, cold_flags, strict=True) if not c]
        load = [took for name, _, took in loads if which in ("all", backend(name))] if which != "probe" else []
        hit = len(warm) / len(mine) if mine else 0.0
        memory = f"{peak / MB:8.0f} {final / MB:8.0f} {cores:5.2f}" if which == "all" else f"{'':8} {'':8} {'':5}"
        print(
            f"{label:<20} {which:<7} {memory} {len(mine):8d} {_ms(warm, 50)} {_ms(warm, 99)} "
            f"{_ms(load, 50)} {_ms(load, 99)} {_ms(cold, 50)} {_ms(cold, 99)} {hit:7.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--models", type=int, default=40)
    parser.add_argument("--megabytes", type=int, default=32, help="resident memory each model holds")
    parser.add_argument("--holds", type=int, default=8, help="how many models the budget holds")
    parser.add_argument("--zipf", type=float, default=1.1, help="the Zipf exponent of the traffic")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=4, help="clients sending at once (even: HTTP, odd: gRPC)")
    parser.add_argument("--load-nice", type=int, default=10, help="the servers' --model-load-nice")
    parser.add_argument("--concurrency", type=int, default=0, help="--model-load-on-demand-concurrency (0: default)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="inferd-many-"))
    models: dict[str, dict[str, str | bytes]] = {}
    for i in range(args.models):
        name = f"m{i:03d}"
        if backend(name) == "onnx":
            models[name] = {"config.pbtxt": ONNX_CONFIG, "1/model.onnx": onnx_model(i, args.megabytes)}
        else:
            models[name] = {"config.pbtxt": CONFIG.format(mb=args.megabytes, i=i), "1/model.py": MODEL}
    repo = write_repository(root / "models", models)
    budget = int((args.holds + 0.5) * args.megabytes * MB)
    print(
        f"{args.models} models ({(args.models + 1) // 2} Python, {args.models // 2} ONNX) x {args.megabytes} MiB, "
        f"Zipf s={args.zipf}, {args.seconds:g} s, {args.clients} clients (HTTP, gRPC); budget {budget / MB:.0f} MiB "
        f"(holds {args.holds}); --model-load-nice={args.load_nice}, concurrency {args.concurrency or 'default'}"
    )
    print(
        f"{'setup':<20} {'backend':<7} {'peak MiB':>8} {'end MiB':>8} {'cores':>5} {'requests':>8} {'warm50':>7} {'warm99':>7} "
        f"{'load50':>7} {'load99':>7} {'cold50':>7} {'cold99':>7} {'hit':>7}   (ms)"
    )
    try:
        nice = [f"--model-load-nice={args.load_nice}"]
        run(repo, nice, args, "fully loaded")
        on_demand = ["--model-load-on-demand=true", f"--model-memory-budget={budget}"]
        concurrency = [f"--model-load-on-demand-concurrency={args.concurrency}"] if args.concurrency else []
        run(repo, [*nice, *on_demand, *concurrency], args, "on demand + budget")
    finally:
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        root.rmdir()


if __name__ == "__main__":
    main()
