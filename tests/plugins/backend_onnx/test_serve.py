"""The onnxruntime backend end to end: a real ``inferd serve``, tritonclient over HTTP and gRPC.

One server serves every model of one repository (good and broken ones) for the whole module;
expected values come from onnxruntime run directly in the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.lazy import lazy_import
from tests.servers import Servers

from . import models as m

ort = lazy_import("onnxruntime")

BATCHED_ADD = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "MM" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""

CONFIGS = {
    "add_matmul": BATCHED_ADD + "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n',
    "strings": """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 2 ] } ]
""",
    "fp16": """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP16 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP16 dims: [ 3 ] } ]
optimization { graph { level: 1 } }
""",
    "booleans": """
backend: "onnxruntime"
input [ { name: "A" data_type: TYPE_BOOL dims: [ 2, 3 ] }, { name: "B" data_type: TYPE_BOOL dims: [ 2, 3 ] } ]
output [ { name: "AND" data_type: TYPE_BOOL dims: [ 2, 3 ] }, { name: "NOT" data_type: TYPE_BOOL dims: [ 2, 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    "mlp": """
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "x" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    "external_file": """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 64 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    "bad_name": BATCHED_ADD.replace('name: "B"', 'name: "NOPE"'),
    "bad_dtype": BATCHED_ADD.replace('name: "B" data_type: TYPE_FP32', 'name: "B" data_type: TYPE_FP16'),
    "bad_dims": BATCHED_ADD.replace(
        'name: "MM" data_type: TYPE_FP32 dims: [ 3 ]', 'name: "MM" data_type: TYPE_FP32 dims: [ 5 ]'
    ),
    "corrupt": BATCHED_ADD,
}

#: Model -> text its UNAVAILABLE reason must contain.
BROKEN = {
    # Triton's onnxruntime backend's sentences first; inferd's hint (which config entry) after
    "bad_name": [
        "unexpected inference input 'NOPE', allowed inputs are: A, B; model 'bad_name', configuration input[1]"
    ],
    "bad_dtype": [
        "unable to load model 'bad_dtype', configuration expects datatype TYPE_FP16 for input 'B', model "
        "provides TYPE_FP32"
    ],
    "bad_dims": [
        "model 'bad_dims', tensor 'MM': the model expects 2 dimensions (shape [-1,3]) but the model "
        "configuration specifies 2 dimensions",
        "making complete shape [-1,5])",
    ],
    "corrupt": ["corrupt", "onnxruntime cannot load", "model.onnx"],
    "corrupt_auto": ["corrupt_auto", "onnxruntime cannot load"],
}


def build_repository(root: Path) -> tuple[Path, dict[str, Path]]:
    """Write every model; returns the repository and each model's ONNX file (for direct runs)."""
    files: dict[str, Path] = {}

    def put(name: str, model: Any, config: str | None = None) -> Path:
        path = root / name / "1" / "model.onnx"
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        if model is not None:
            m.save(model, path)
        if config is not None:
            (root / name / "config.pbtxt").write_text(config)
        files[name] = path
        return path

    for name, builder in [("add_matmul", m.add_matmul), ("strings", m.strings), ("fp16", m.fp16),
                          ("booleans", m.booleans), ("bad_name", m.add_matmul), ("bad_dtype", m.add_matmul),
                          ("bad_dims", m.add_matmul)]:  # fmt: skip
        put(name, builder(), CONFIGS[name])
    put("auto_batch", m.add_matmul())  # no config.pbtxt: auto-complete
    put("auto_fixed", m.fixed_int())
    mlp_path = put("mlp", None, CONFIGS["mlp"])
    if not m.torch_mlp(mlp_path):
        m.save(m.mlp_fallback(), mlp_path)
    # Triton's directory form: <version>/model.onnx/ holding model.onnx and its external data.
    put("external_dir", None)
    files["external_dir"] = root / "external_dir" / "1" / "model.onnx" / "model.onnx"
    m.save_external(m.big_linear(batch=2), files["external_dir"], "weights.bin")
    m.save_external(m.big_linear(), put("external_file", None, CONFIGS["external_file"]), "model.onnx.data")
    corrupt = put("corrupt", None, CONFIGS["corrupt"])
    corrupt.write_bytes(np.random.default_rng(1).bytes(2048))
    put("corrupt_auto", None).write_bytes(b"\x08\x07not an onnx model" * 50)
    return root, files


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    return build_repository(tmp_path_factory.mktemp("onnx") / "models")


@pytest.fixture(scope="module")
def server(repo: tuple[Path, dict[str, Path]], serve: Servers) -> ServerProcess:
    return serve(repo[0], "--log-verbose", "1", "--exit-on-error=false", "--strict-readiness=false")


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Any:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: ServerProcess) -> Any:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


def direct(path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the model with onnxruntime in the test process (strings as str, like ORT wants)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def infer(client: Any, model: str, inputs: dict[str, np.ndarray], datatypes: dict[str, str],
          outputs: list[str] | None = None) -> Any:  # fmt: skip
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensors = []
    for name, value in inputs.items():
        t = mod.InferInput(name, list(value.shape), datatypes[name])
        if mod is httpclient:
            t.set_data_from_numpy(value, binary_data=True)
        else:
            t.set_data_from_numpy(value)
        tensors.append(t)
    requested = [mod.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, tensors, outputs=requested)


def index(server: ServerProcess) -> dict[str, dict[str, str]]:
    req = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        return {e["name"]: e for e in json.loads(r.read())}


def get_json(server: ServerProcess, path: str) -> Any:
    with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=10) as r:
        return json.loads(r.read())


# -- plugin wiring --------------------------------------------------------------------------------


def test_hooks_do_not_import_onnxruntime() -> None:
    code = "import inferd_backend_onnx.hooks, sys; assert 'onnxruntime' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- loading --------------------------------------------------------------------------------------


def test_index_states(server: ServerProcess) -> None:
    entries = index(server)
    ready = {"add_matmul", "strings", "fp16", "booleans", "mlp", "external_dir", "external_file", "auto_fixed"}
    for name in ready:
        assert entries[name].get("state") == "READY", (name, entries[name], server.log()[-3000:])
    for name, needles in BROKEN.items():
        entry = entries[name]
        assert entry.get("state") == "UNAVAILABLE", entry
        for needle in needles:
            assert needle in entry.get("reason", ""), (name, needle, entry)


def test_log_names_execution_providers(server: ServerProcess) -> None:
    log = server.log()
    assert "model 'add_matmul' version 1 instance 'add_matmul_0_1' (KIND_CPU)" in log
    assert "session on CPUExecutionProvider; intra_op_threads=1" in log


# -- inference ------------------------------------------------------------------------------------


def test_add_matmul_batch(client: Any, repo: Any) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.5, dtype=np.float32)
    result = infer(client, "add_matmul", {"A": a, "B": b}, {"A": "FP32", "B": "FP32"})
    want = direct(repo[1]["add_matmul"], {"A": a, "B": b})
    np.testing.assert_allclose(result.as_numpy("SUM"), want["SUM"])
    np.testing.assert_allclose(result.as_numpy("MM"), want["MM"], rtol=1e-6)
    assert result.as_numpy("MM").shape == (3, 3)


def test_requested_output_subset(client: Any, repo: Any) -> None:
    a = np.ones((2, 4), dtype=np.float32)
    result = infer(client, "add_matmul", {"A": a, "B": a}, {"A": "FP32", "B": "FP32"}, outputs=["MM"])
    assert result.as_numpy("SUM") is None
    np.testing.assert_allclose(result.as_numpy("MM"), direct(repo[1]["add_matmul"], {"A": a, "B": a})["MM"], rtol=1e-6)


def run_concurrently(server: ServerProcess, model: str, max_rows: int, callers: int = 4) -> None:
    """Callers send requests of 1..max_rows rows (some asking for MM only) and check every answer."""
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            client = httpclient.InferenceServerClient(server.http_url)
            for i in range(10):
                a = np.full((1 + (seed + i) % max_rows, 4), seed + i, dtype=np.float32)
                only_mm = seed % 2 == 0
                got = infer(client, model, {"A": a, "B": a}, {"A": "FP32", "B": "FP32"}, ["MM"] if only_mm else None)
                assert (got.as_numpy("SUM") is None) == only_mm
                if not only_mm:
                    np.testing.assert_allclose(got.as_numpy("SUM"), a + a)
                np.testing.assert_allclose(got.as_numpy("MM"), a @ m.MATMUL_W, rtol=1e-5)
            client.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_two_instances_serve_concurrently(server: ServerProcess) -> None:
    config = get_json(server, "/v2/models/add_matmul/config")
    assert [(g["count"], g["kind"]) for g in config["instance_group"]] == [(2, "KIND_CPU")]
    run_concurrently(server, "add_matmul", max_rows=4)


def test_dynamic_batching_splits_outputs_back(server: ServerProcess) -> None:
    run_concurrently(server, "auto_batch", max_rows=2, callers=6)


def test_strings(client: Any, repo: Any) -> None:
    data = np.array([[b"hello", "h\u00e9llo".encode()], [b"", b"x" * 300]], dtype=object)
    result = infer(client, "strings", {"IN": data}, {"IN": "BYTES"})
    out = result.as_numpy("OUT")
    want = direct(repo[1]["strings"], {"IN": np.vectorize(lambda b: b.decode(), otypes=[object])(data)})["OUT"]
    assert out.shape == (2, 2)
    assert [bytes(v) for v in out.ravel()] == [s.encode() for s in want.ravel()]


def test_strings_not_utf8_is_invalid_argument(http: Any) -> None:
    data = np.array([[b"ok", b"\xff\xfe"]], dtype=object)
    with pytest.raises(InferenceServerException) as info:
        infer(http, "strings", {"IN": data}, {"IN": "BYTES"})
    assert "strings" in str(info.value) and "UTF-8" in str(info.value) and "'IN'" in str(info.value)


def test_fp16(client: Any, repo: Any) -> None:
    x = np.array([[1.5, -2.25, 3.0], [0.125, 4.0, -1.0]], dtype=np.float16)
    result = infer(client, "fp16", {"X": x}, {"X": "FP16"})
    y = result.as_numpy("Y")
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, direct(repo[1]["fp16"], {"X": x})["Y"])


def test_booleans(client: Any, repo: Any) -> None:
    a = np.array([[True, False, True], [False, False, True]])
    b = np.array([[True, True, False], [False, True, True]])
    result = infer(client, "booleans", {"A": a, "B": b}, {"A": "BOOL", "B": "BOOL"})
    want = direct(repo[1]["booleans"], {"A": a, "B": b})
    np.testing.assert_array_equal(result.as_numpy("AND"), want["AND"])
    np.testing.assert_array_equal(result.as_numpy("NOT"), want["NOT"])
    assert result.as_numpy("AND").dtype == np.bool_


def test_mlp(client: Any, repo: Any) -> None:
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    result = infer(client, "mlp", {"x": x}, {"x": "FP32"})
    np.testing.assert_allclose(result.as_numpy("y"), direct(repo[1]["mlp"], {"x": x})["y"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "rows"), [("external_dir", 2), ("external_file", 3)])
def test_external_data(client: Any, repo: Any, name: str, rows: int) -> None:
    x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
    result = infer(client, name, {"X": x}, {"X": "FP32"})
    np.testing.assert_allclose(result.as_numpy("Y"), direct(repo[1][name], {"X": x})["Y"], rtol=1e-5, atol=1e-5)


def test_batch_over_max_batch_size_is_refused(http: Any) -> None:
    # dims are checked by the server; a batch past max_batch_size is refused before onnxruntime.
    a = np.ones((9, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        infer(http, "add_matmul", {"A": a, "B": a}, {"A": "FP32", "B": "FP32"})
    assert "add_matmul" in str(info.value)


# -- auto-complete --------------------------------------------------------------------------------


def test_autocomplete_fixed_shapes(server: ServerProcess, client: Any) -> None:
    config = get_json(server, "/v2/models/auto_fixed/config")
    assert config["backend"] == "onnxruntime" and config["platform"] == "onnxruntime_onnx"
    assert config.get("max_batch_size", 0) == 0
    assert "dynamic_batching" not in config
    assert [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config["input"]] == [
        ("X", "TYPE_INT32", [2, 2]), ("Y", "TYPE_INT32", [2, 2]),
    ]  # fmt: skip
    assert [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in config["output"]] == [
        ("Z", "TYPE_INT32", [2, 2])
    ]
    assert config["instance_group"][0]["count"] == 2  # Triton's default for onnxruntime on CPU
    x = np.arange(4, dtype=np.int32).reshape(2, 2)
    result = infer(client, "auto_fixed", {"X": x, "Y": x}, {"X": "INT32", "Y": "INT32"})
    np.testing.assert_array_equal(result.as_numpy("Z"), x + x)


def test_autocomplete_batching(server: ServerProcess, client: Any) -> None:
    entry = index(server)["auto_batch"]
    assert entry.get("state") == "READY", entry
    config = get_json(server, "/v2/models/auto_batch/config")
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(t["name"], [int(d) for d in t["dims"]]) for t in config["input"]] == [("A", [4]), ("B", [4])]
    assert [(t["name"], [int(d) for d in t["dims"]]) for t in config["output"]] == [("SUM", [4]), ("MM", [3])]
    a = np.ones((2, 4), dtype=np.float32)
    result = infer(client, "auto_batch", {"A": a, "B": a}, {"A": "FP32", "B": "FP32"})
    np.testing.assert_allclose(result.as_numpy("SUM"), a + a)


# -- a missing framework --------------------------------------------------------------------------


def test_missing_onnxruntime_is_a_clear_load_error(tmp_path: Path) -> None:
    root = tmp_path / "models"
    m.save(m.fixed_int(), root / "needs_ort" / "1" / "model.onnx")
    (root / "needs_ort" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    blocker = tmp_path / "block"
    (blocker / "onnxruntime").mkdir(parents=True)
    (blocker / "onnxruntime" / "__init__.py").write_text(
        "raise ImportError('No module named onnxruntime (blocked by the test)')\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    srv = ServerProcess([root], ["--exit-on-error=false", "--strict-readiness=false"], env=env).start()
    try:
        entry = index(srv)["needs_ort"]
    finally:
        srv.stop()
    assert entry["state"] == "UNAVAILABLE"
    assert "onnxruntime" in entry["reason"] and "not installed" in entry["reason"], entry


@pytest.mark.parametrize(("workers", "count"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_default_threads_share_the_cores_among_workers(tmp_path: Path, workers: int, count: int) -> None:
    """An ONNX model without ``intra_op_thread_count`` sizes its sessions from the cores of its
    worker: the process's CPU affinity divided among ``--workers``, then among the instances that
    worker holds. A config's instances are dealt out among the workers (``count: 2`` under
    ``--workers 2``: one session in each), so the server runs ``max(count, workers)`` sessions."""
    model_dir = tmp_path / "models" / "add_matmul"
    m.save(m.add_matmul(), model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(BATCHED_ADD + f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n")
    per_worker = max(1, count // workers)
    expected = max(1, len(os.sched_getaffinity(0)) // workers // per_worker)
    with ServerProcess([tmp_path / "models"], [f"--workers={workers}", "--log-verbose=1"]) as srv:
        lines = [line for line in srv.log().splitlines() if "onnxruntime" in line and "intra_op_threads=" in line]
    assert len(lines) == max(count, workers), lines  # one session per instance, at least one per worker
    assert all(line.endswith(f"intra_op_threads={expected}") for line in lines), lines
    names = {re.search(r"instance '([^']+)'", line).group(1) for line in lines}
    assert names == {f"add_matmul_0_{n}" for n in range(count)}, lines
