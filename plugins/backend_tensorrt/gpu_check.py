"""The Python half of gpu_check.sh: build, serve, call, compare; one PASS/FAIL line per check.

Runs with an environment holding inferd, the onnx and tensorrt plugins, onnx and tritonclient.
Without TensorRT it still builds the ONNX model and reports the TensorRT checks as FAIL.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

W = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.0) / 7.0
B = np.array([0.5, -1.0, 2.0], dtype=np.float32)
RESULTS: list[bool] = []

TRT_PROFILES_CONFIG = """
name: "trt_profiles"
platform: "tensorrt_plan"
max_batch_size: 32
dynamic_batching {}
instance_group [{ kind: KIND_GPU count: 2 gpus: [0] profile: ["0", "1"] }]
"""

ONNX_GPU_CONFIG = """
name: "onnx_gpu"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [3] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ kind: KIND_GPU count: 1 gpus: [0] }]
"""


def report(ok: bool, what: str, detail: str = "") -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {what}" + (f": {detail}" if detail else ""), flush=True)
    RESULTS.append(ok)
    return ok


def attempt(what: str, fn: Callable[[], Any]) -> Any:
    """Run one step; report it; return its value (True for None), or None when it raised."""
    start = time.monotonic()
    try:
        value = fn()
    except Exception as exc:
        report(False, what, f"{type(exc).__name__}: {exc}")
        return None
    report(True, what, f"{time.monotonic() - start:.1f} s")
    return True if value is None else value


def onnx_model() -> bytes:
    """INPUT0 [batch, 4] -> OUTPUT0 = INPUT0 @ W + B, OUTPUT1 = relu(INPUT0)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["INPUT0", "W"], ["XW"]),
            helper.make_node("Add", ["XW", "B"], ["OUTPUT0"]),
            helper.make_node("Relu", ["INPUT0"], ["OUTPUT1"]),
        ],
        "gpu_check",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.FLOAT, ["batch", 4]),
        ],
        initializer=[numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def expected(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"OUTPUT0": x @ W + B, "OUTPUT1": np.maximum(x, 0)}


def build_plans(onnx_bytes: bytes) -> dict[str, bytes] | None:
    tensorrt = attempt("import tensorrt", lambda: __import__("tensorrt"))
    if tensorrt is None:
        return None
    print(f"INFO TensorRT {tensorrt.__version__}", flush=True)
    from inferd_backend_tensorrt.build import build_engine

    one = attempt(
        "build engine, 1 profile (batch 1..32)",
        lambda: build_engine(onnx_bytes, [{"INPUT0": ((1, 4), (8, 4), (32, 4))}]),
    )
    two = attempt(
        "build engine, 2 profiles (batch 1..4, 5..32)",
        lambda: build_engine(
            onnx_bytes, [{"INPUT0": ((1, 4), (2, 4), (4, 4))}, {"INPUT0": ((5, 4), (16, 4), (32, 4))}]
        ),
    )
    return {"one": one, "two": two} if one and two else None


def write_models(root: Path, onnx_bytes: bytes, plans: dict[str, bytes] | None) -> list[str]:
    from inferd.testing import write_repository

    models: dict[str, dict[str, Any]] = {"onnx_gpu": {"config.pbtxt": ONNX_GPU_CONFIG, "1/model.onnx": onnx_bytes}}
    if plans:
        models["trt_auto"] = {"1/model.plan": plans["one"]}  # no config.pbtxt: auto-completed
        models["trt_profiles"] = {"config.pbtxt": TRT_PROFILES_CONFIG, "1/model.plan": plans["two"]}
    write_repository(root, models)
    return sorted(models)


def check_model(server: Any, model: str, batches: list[int]) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    for name, module, url in (("http", httpclient, server.http_url), ("grpc", grpcclient, server.grpc_url)):
        client = module.InferenceServerClient(url)
        for rows in batches:

            def call(rows: int = rows, module: Any = module, client: Any = client) -> None:
                x = np.random.default_rng(rows).uniform(-2, 2, (rows, 4)).astype(np.float32)
                tensor = module.InferInput("INPUT0", [rows, 4], "FP32")
                tensor.set_data_from_numpy(x)
                result = client.infer(model, [tensor])
                for out, want in expected(x).items():
                    np.testing.assert_allclose(result.as_numpy(out), want, rtol=1e-3, atol=1e-3, err_msg=out)

            attempt(f"{model} {name} infer batch {rows} matches numpy", call)
        client.close()


def check_autocomplete(server: Any) -> None:
    import tritonclient.http as httpclient

    config = httpclient.InferenceServerClient(server.http_url).get_model_config("trt_auto")
    got = (
        config.get("max_batch_size"),
        [(i["name"], i["dims"]) for i in config.get("input", [])],
        sorted(o["name"] for o in config.get("output", [])),
        config["instance_group"][0]["kind"],
    )
    want = (32, [("INPUT0", [4])], ["OUTPUT0", "OUTPUT1"], "KIND_GPU")
    report(got == want, "trt_auto config auto-completed from the engine", f"{got}" if got != want else "")


def check_onnx_provider(log: str) -> None:
    lines = [line for line in log.splitlines() if "'onnx_gpu'" in line and "session on" in line]
    fallback = [
        line
        for line in log.splitlines()
        if "'onnx_gpu'" in line
        and "CUDAExecutionProvider" in line
        and ("not available" in line or "could not start" in line)
    ]
    ok = bool(lines) and all("CUDAExecutionProvider" in line for line in lines) and not fallback
    report(
        ok,
        "onnx_gpu runs on CUDAExecutionProvider",
        "" if ok else "; ".join(fallback or lines) or "no session line in the log",
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    work = parser.parse_args().work
    work.mkdir(parents=True, exist_ok=True)
    smi = shutil.which("nvidia-smi")
    gpus = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.strip() if smi else ""
    print(f"INFO {gpus or 'nvidia-smi is missing or lists no GPU'}", flush=True)
    onnx_bytes = attempt("build ONNX model with onnx.helper", onnx_model)
    if onnx_bytes is None:
        return 1
    plans = build_plans(onnx_bytes)
    from inferd.testing import ServerProcess

    models = write_models(work / "models", onnx_bytes, plans)
    server = ServerProcess([work / "models"], ["--model-control-mode=explicit"], log_path=work / "inferd.log")
    if attempt("inferd serve starts", lambda: server.start(timeout=180)) is None:
        print(server.log())
        return 1
    try:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(server.http_url)
        loaded = [m for m in models if attempt(f"load {m}", lambda m=m: client.load_model(m)) is not None]
        client.close()
        batches = {"onnx_gpu": [1, 7], "trt_auto": [1, 7, 32], "trt_profiles": [3, 20]}
        for model in loaded:
            check_model(server, model, batches[model])
        if "trt_auto" in loaded:
            attempt("trt_auto config", lambda: check_autocomplete(server))
        check_onnx_provider(server.log())
    finally:
        server.stop()
    if not all(RESULTS):
        print(f"--- server log ({work / 'inferd.log'}), last lines ---\n{server.log()[-4000:]}")
    passed = sum(RESULTS)
    print(f"{'PASS' if all(RESULTS) else 'FAIL'} gpu_check: {passed}/{len(RESULTS)} checks passed", flush=True)
    return 0 if all(RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
