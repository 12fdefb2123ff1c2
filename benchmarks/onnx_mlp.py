"""Throughput of an ONNX MLP served by inferd's onnxruntime backend, against onnxruntime in-process.

The model: input [batch, 256] FP32 -> 1024 -> Relu -> 1024 -> Relu -> 16, random weights, built with
onnx.helper. The script writes it into a temporary repository, starts ``inferd serve`` and
measures batch-1 inferences per second through HTTP and gRPC (binary tensors) at each concurrency
(one thread and one client per concurrent caller), each for a fixed time. It also runs the same
model in this process with onnxruntime in a single-threaded loop and prints the ratio. It prints
numbers only; it never asserts.

    python benchmarks/onnx_mlp.py --seconds 5
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from inferd.testing import ServerProcess
from inferd_backend_onnx.options import default_intra_op_threads

IN, HIDDEN, OUT = 256, 1024, 16


def build_mlp(path: Path, seed: int = 0) -> None:
    """Write the MLP to ``path`` (dynamic batch dimension, IR version 9 for older onnxruntime)."""
    rng = np.random.default_rng(seed)
    sizes = [(IN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, OUT)]
    inits, nodes, x = [], [], "INPUT"
    for i, (n_in, n_out) in enumerate(sizes):
        w = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        b = (rng.standard_normal(n_out) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [f"mm{i}"]))
        y = "OUTPUT" if i == len(sizes) - 1 else f"h{i}"
        nodes.append(helper.make_node("Add", [f"mm{i}", f"B{i}"], [y if i == len(sizes) - 1 else f"a{i}"]))
        if i < len(sizes) - 1:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [y]))
        x = y
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, ["batch", OUT])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def write_config(model_dir: Path, args: argparse.Namespace) -> None:
    lines = [
        'backend: "onnxruntime"',
        "max_batch_size: 16",
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {IN} ] }} ]',
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {OUT} ] }} ]',
    ]
    kind = "KIND_GPU" if args.gpu else "KIND_CPU"
    count = f"count: {args.instances} " if args.instances else ""
    lines.append(f"instance_group [ {{ {count}kind: {kind} }} ]")
    if args.intra_op_threads is not None:
        lines.append(
            f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{args.intra_op_threads}" }} }}'
        )
    (model_dir / "config.pbtxt").write_text("\n".join(lines) + "\n")


def measure(
    make: Callable[[], Callable[[], object]], callers: int, seconds: float, warmup: float = 0.5
) -> tuple[float, float]:
    """Run ``callers`` threads, each calling ``make()``'s result in a loop; returns (inferences/s, mean ms).

    Each thread builds its own caller (tritonclient.http clients belong to the thread that made
    them), warms up for ``warmup`` seconds, then all measure together for ``seconds``.
    """
    window: list[float] = []  # the end of the measurement, set when every caller is warm
    ready = threading.Barrier(callers + 1, action=lambda: window.append(time.monotonic() + seconds))
    counts = [0] * callers
    busy = [0.0] * callers
    errors: list[BaseException] = []

    def loop(i: int) -> None:
        try:
            call = make()
            until = time.monotonic() + warmup
            while time.monotonic() < until:
                call()
            ready.wait()
            stop = window[0]
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                call()
                busy[i] += time.perf_counter() - t0
                counts[i] += 1
        except BaseException as exc:  # reported, never asserted
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(callers)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - (window[0] - seconds) if window else float("nan")
    if errors:
        print(f"    ({len(errors)} caller(s) failed: {errors[0]!r})")
    total = sum(counts)
    return total / elapsed, (sum(busy) / total * 1000.0) if total else float("nan")


def http_caller(url: str, x: np.ndarray) -> Callable[[], None]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    out = [httpclient.InferRequestedOutput("OUTPUT", binary_data=True)]
    return lambda: client.infer("mlp", [inp], outputs=out).as_numpy("OUTPUT")


def grpc_caller(url: str, x: np.ndarray) -> Callable[[], None]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    inp = grpcclient.InferInput("INPUT", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out = [grpcclient.InferRequestedOutput("OUTPUT")]
    return lambda: client.infer("mlp", [inp], outputs=out).as_numpy("OUTPUT")


def in_process(path: Path, x: np.ndarray, seconds: float, threads: int | None, gpu: bool) -> tuple[float, float]:
    """onnxruntime in this process, one caller thread; ``threads`` None leaves intra-op threads to ORT."""
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if gpu else ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(path), sess_options=so, providers=providers)
    return measure(lambda: lambda: session.run(["OUTPUT"], {"INPUT": x}), 1, seconds)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="duration of each measurement (default 5)")
    p.add_argument("--concurrency", default="1,16", help="comma-separated concurrent callers (default 1,16)")
    p.add_argument("--protocols", default="http,grpc", help="comma-separated: http, grpc (default both)")
    p.add_argument("--instances", type=int, default=0, help="instance_group count (default: the backend's, 2 on CPU)")
    p.add_argument("--intra-op-threads", type=int, default=None, help="intra_op_thread_count (default: the backend's)")
    p.add_argument("--gpu", action="store_true", help="serve with a KIND_GPU instance group (CUDA EP)")
    return p.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    x = np.random.default_rng(1).standard_normal((1, IN)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="inferd-onnx-bench-") as tmp:
        repo = Path(tmp) / "models"
        path = repo / "mlp" / "1" / "model.onnx"
        build_mlp(path)
        write_config(repo / "mlp", args)
        print(f"MLP {IN}-{HIDDEN}-{HIDDEN}-{OUT} FP32, batch 1, {args.seconds:g} s per measurement")
        print(
            f"machine: {len(os.sched_getaffinity(0))} usable cores, onnxruntime {ort.__version__}, numpy {np.__version__}"
        )
        # The baseline is onnxruntime as a user runs it (its default threads, or --intra-op-threads);
        # the second line uses the threads each server instance gets, for a like-for-like view.
        base_rate, base_lat = in_process(path, x, args.seconds, args.intra_op_threads, args.gpu)
        label = "default (one per core)" if args.intra_op_threads is None else str(args.intra_op_threads)
        print(
            f"onnxruntime in-process, 1 caller, intra-op threads {label}: {base_rate:9.1f} infer/s  {base_lat:7.3f} ms"
        )
        if args.intra_op_threads is None and not args.gpu:
            per_instance = default_intra_op_threads(args.instances or 2)
            rate, lat = in_process(path, x, args.seconds, per_instance, args.gpu)
            print(
                f"onnxruntime in-process, 1 caller, intra-op threads {per_instance} (as each server instance): "
                f"{rate:9.1f} infer/s  {lat:7.3f} ms"
            )
        server = ServerProcess([repo], ["--model-control-mode", "none"]).start()
        try:
            urls = {"http": server.http_url, "grpc": server.grpc_url}
            makers = {"http": http_caller, "grpc": grpc_caller}
            for protocol in [p.strip() for p in args.protocols.split(",") if p.strip()]:
                for conc in [int(c) for c in args.concurrency.split(",") if c.strip()]:
                    make = makers[protocol]
                    rate, latency = measure(lambda: make(urls[protocol], x), conc, args.seconds)  # noqa: B023
                    print(
                        f"inferd {protocol:<4} concurrency {conc:>2}: {rate:9.1f} infer/s  {latency:7.3f} ms  "
                        f"ratio to in-process {rate / base_rate if base_rate else float('nan'):5.2f}"
                    )
            setup = [line for line in server.log().splitlines() if "session on" in line]
            for line in setup[:1]:
                print("server:", line[line.find("model '") :])
        finally:
            server.stop()
    print("reproduce: python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__), *argv]))


if __name__ == "__main__":
    main(sys.argv[1:])
