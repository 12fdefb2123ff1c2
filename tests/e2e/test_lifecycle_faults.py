"""Hot reload cannot lose a serving version: every way a new version can fail, under traffic.

One poll-mode server per ``--workers`` count serves one model per failure kind. Each model serves
version 1; the test then gives every model a bad version 2 at once (a model file that does not
parse, ``initialize`` raising, warm-up failing, a version directory with no model file, a
half-copied file, files removed while the version loads, a file the server may not read, an
``EXECUTION_ENV_PATH`` archive that does not unpack, an isolated stub that dies at start), and
fixes or removes the bad files. Throughout, two threads (HTTP and gRPC, tritonclient) ask every
model with no version (the policy's latest) and pinned to version 1: not one request may fail.
The repository index and ``/v2/health/ready`` must say what docs/configuration.md says: the
failed version UNAVAILABLE with its reason, the server ready (a version of every model serves),
and, once the files are fixed or removed, no stale row and no restart.

Tests run as root, where ``chmod 000`` denies nothing: the server then runs under ``setpriv``
without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so file permissions apply to it as to any user
(as root without ``setpriv``, the permission case is left out). An explicit-mode load of a bad
version, and the issue's own reproducer (an ONNX version 2 that is not an ONNX file), follow.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e.example_builder import build_models
from tests.lazy import lazy_import
from tests.waiting import wait_for

onnx = lazy_import("onnx", skip="the onnx package builds the ONNX model")
numpy_helper = lazy_import("onnx.numpy_helper", skip="the onnx package builds the ONNX model")

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
WARMUP = """
model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "X" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } } ]
"""
PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }\n'
ENV_PATH = 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 8 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
# Y = X + OFFSET; {init} and {execute} put a failure in initialize or execute.
MODEL_PY = """
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils

OFFSET = {offset}


class TritonPythonModel:
    def initialize(self, args):
        {init}

    def execute(self, requests):
        {execute}
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + OFFSET)]))
        return out
"""
# Version 2 of 'removed_while_loading': says it is loading, waits until its directory is removed,
# then reads its weights from it.
WAIT_FOR_REMOVAL = """
        Path({marker!r}).touch()
        here = Path(args["model_repository"]) / args["model_version"]
        deadline = time.monotonic() + 120
        while here.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.weights = (here / "weights.txt").read_text()
"""
X = np.array([1, 2, 3, 4], np.float32)
ONNX_X = np.arange(8, dtype=np.float32).reshape(1, 8) / 8


def put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def model_py(offset: int, init: str = "pass", execute: str = "pass") -> str:
    return MODEL_PY.format(offset=offset, init=init.strip(), execute=execute.strip())


@dataclass
class Fault:
    """One failure kind (:func:`break_version_2` says how its version 2 goes bad): its model, the
    answers' offset, what its version 2 row's reason then says, and whether it recovers by fixing
    version 2 (which then replaces version 1) or by removing the bad files."""

    model: str
    offset: int
    reason: str
    fixed: bool = False
    config: str = CONFIG

    def v1_answer(self) -> np.ndarray:
        return X + self.offset + 1

    def v2_answer(self) -> np.ndarray:
        return X + self.offset + 2


FAULTS = [
    Fault("unparsable", 100, "SyntaxError"),
    Fault("init_raises", 200, "RuntimeError: initialize failed on purpose", fixed=True),
    Fault("warmup_fails", 300, "warm-up failed on purpose", config=CONFIG + WARMUP),
    Fault("no_model_file", 400, "Python model file not found", fixed=True),
    Fault("half_copied", 500, "SyntaxError", fixed=True),
    Fault("removed_while_loading", 600, "FileNotFoundError"),
    Fault("permission_denied", 700, "PermissionError", fixed=True),
    Fault("env_archive", 800, "cannot extract EXECUTION_ENV_PATH"),
    Fault("stub_dies", 900, "exited with code 3", config=CONFIG + PROCESS),
]


def onnx_weights(path: Path) -> tuple[np.ndarray, np.ndarray]:
    graph = onnx.load(str(path)).graph
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    return weights["W0"], weights["W1"]


def build_onnx(path: Path) -> np.ndarray:
    """examples/build_models.py's MLP at ``path``; its answer to ONNX_X, computed from its weights."""
    build_models().build_mlp(path)
    w0, w1 = onnx_weights(path)
    return np.maximum(ONNX_X @ w0, 0) @ w1


class UnprivilegedServer(ServerProcess):
    """``inferd serve`` that file permissions apply to, even when the tests run as root."""

    def command(self) -> list[str]:
        if os.geteuid() != 0:
            return super().command()
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
        return [*drop, *super().command()]


def log_records(srv: ServerProcess) -> list[str]:
    """The server's log records (a record's message may span lines: a traceback, a tar error)."""
    return re.split(r"\n(?=[IWEF]\d{4} )", srv.log_path.read_text(errors="replace").rstrip("\n"))


def fresh_http(srv: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(srv.http_url, connection_timeout=30, network_timeout=30)


def rows(srv: ServerProcess, model: str) -> list[dict[str, str]]:
    """``model``'s repository-index rows, over a new connection (with workers, any worker answers)."""
    client = fresh_http(srv)
    try:
        return [r for r in client.get_model_repository_index() if r["name"] == model]
    finally:
        client.close()


def ready(srv: ServerProcess) -> bool:
    client = fresh_http(srv)
    try:
        return bool(client.is_server_ready())
    finally:
        client.close()


def agreed(check: Callable[[], bool], times: int) -> bool:
    """``check()`` holds ``times`` in a row, each over new connections (with ``--workers 2``, the
    kernel hands them to either worker: both must agree)."""
    return all(check() for _ in range(times))


class Traffic:
    """Two threads (HTTP, gRPC), each asking every model, with no version and pinned to version 1,
    over new connections every round; every failure or wrong answer is kept."""

    def __init__(self, srv: ServerProcess, faults: list[Fault], onnx_answer: np.ndarray | None = None) -> None:
        self.srv = srv
        self.faults = faults
        self.onnx_answer = onnx_answer
        self.failures: list[str] = []
        self.sent = {"http": 0, "grpc": 0}
        self.rounds = {"http": 0, "grpc": 0}
        #: Models whose version 1 is no longer asked for (fixed: version 2 replaces it).
        self.unpinned: set[str] = set()
        #: Models whose version 2 may answer requests naming no version.
        self.replaced: set[str] = set()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in ("http", "grpc")]

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        self.wait_rounds(1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def wait_rounds(self, count: int) -> None:
        """Wait until each thread finished ``count`` more rounds (what it was told since applies)."""
        target = {p: n + count for p, n in self.rounds.items()}
        wait_for(lambda: all(self.rounds[p] >= target[p] for p in target), "traffic rounds", 120, log=self.srv.log)

    def _run(self, protocol: str) -> None:
        module = httpclient if protocol == "http" else grpcclient
        url = self.srv.http_url if protocol == "http" else self.srv.grpc_url
        while not self.stop.is_set():
            client = module.InferenceServerClient(url)
            try:
                self._round(protocol, module, client)
            finally:
                client.close()
            self.rounds[protocol] += 1
            time.sleep(0.01)

    def _round(self, protocol: str, module, client) -> None:
        for fault in self.faults:
            pinned = fault.model not in self.unpinned
            replaced = fault.model in self.replaced
            for version in ("", "1") if pinned else ("",):
                try:
                    answer = self._ask(module, client, fault.model, version)
                except Exception as exc:
                    self.failures.append(f"{protocol} {fault.model} version '{version}': {exc}")
                    continue
                self.sent[protocol] += 1
                if fault.model == "mlp_onnx":
                    good = [self.onnx_answer]
                else:
                    good = [fault.v1_answer()] + ([fault.v2_answer()] if replaced and not version else [])
                if not any(np.allclose(answer, g, rtol=1e-5) for g in good):
                    self.failures.append(f"{protocol} {fault.model} version '{version}': wrong answer {answer}")

    @staticmethod
    def _ask(module, client, model: str, version: str) -> np.ndarray:
        name, data = ("INPUT", ONNX_X) if model == "mlp_onnx" else ("X", X)
        tensor = module.InferInput(name, list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor], model_version=version)
        return result.as_numpy("OUTPUT" if model == "mlp_onnx" else "Y")


def break_version_2(repo: Path, fault: Fault, markers: Path) -> None:
    """Give ``fault.model`` its bad version 2."""
    model = repo / fault.model
    v2 = model / "2"
    name = fault.model
    if name == "mlp_onnx":  # the issue's reproducer
        v2.mkdir()
        (v2 / "model.onnx").write_text("not an onnx file\n")
    elif name == "unparsable":
        put(v2 / "model.py", "class TritonPythonModel(:\n")
    elif name == "init_raises":
        init = "raise RuntimeError('initialize failed on purpose')"
        put(v2 / "model.py", model_py(fault.offset + 2, init=init))
    elif name == "warmup_fails":
        execute = "raise ValueError('warm-up failed on purpose')"
        put(v2 / "model.py", model_py(fault.offset + 2, execute=execute))
    elif name == "no_model_file":
        v2.mkdir()
    elif name == "half_copied":
        text = model_py(fault.offset + 2)
        put(v2 / "model.py", text[: text.index("def initialize(self") + 19])  # the copy stalls mid-line
    elif name == "removed_while_loading":
        init = WAIT_FOR_REMOVAL.format(marker=str(markers / name))
        put(v2 / "weights.txt", "w")
        put(v2 / "model.py", model_py(fault.offset + 2, init))
    elif name == "permission_denied":
        v2.mkdir()
        fd = os.open(v2 / "model.py", os.O_WRONLY | os.O_CREAT, 0o000)  # unreadable from the start
        with os.fdopen(fd, "w") as f:
            f.write(model_py(fault.offset + 2))
    elif name == "env_archive":
        (model / "env.tar.gz").write_bytes(b"\x1f\x8b this is not a gzip archive")
        put(v2 / "model.py", model_py(fault.offset + 2))
        (model / "config.pbtxt").write_text(fault.config + ENV_PATH)
    elif name == "stub_dies":
        put(v2 / "model.py", model_py(fault.offset + 2, init="import os; os._exit(3)"))
    else:
        raise AssertionError(name)


def recover(repo: Path, fault: Fault) -> None:
    """Fix version 2 (``fault.fixed``) or remove the bad files."""
    model = repo / fault.model
    v2 = model / "2"
    if fault.model == "removed_while_loading":
        return  # its bad files are gone already
    if not fault.fixed:
        shutil.rmtree(v2)
        if fault.model == "env_archive":
            (model / "config.pbtxt").write_text(fault.config)
            (model / "env.tar.gz").unlink()
    elif fault.model == "permission_denied":
        (v2 / "model.py").chmod(0o644)
    else:
        put(v2 / "model.py", model_py(fault.offset + 2))


def v2_failed(srv: ServerProcess, fault: Fault) -> bool:
    found = {r.get("version"): r for r in rows(srv, fault.model)}
    v1, v2 = found.get("1", {}), found.get("2", {})
    return (
        v1.get("state") == "READY"
        and v2.get("state") == "UNAVAILABLE"
        and fault.reason in v2.get("reason", "")
        and len(found) == 2
    )


def recovered(srv: ServerProcess, fault: Fault) -> bool:
    found = rows(srv, fault.model)
    if fault.fixed:
        return found == [
            {"name": fault.model, "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
            {"name": fault.model, "version": "2", "state": "READY"},
        ]
    return found == [{"name": fault.model, "version": "1", "state": "READY"}]


def repository(root: Path) -> tuple[Path, np.ndarray]:
    files = {f.model: {"config.pbtxt": f.config, "1/model.py": model_py(f.offset + 1)} for f in FAULTS}
    repo = write_repository(root / "models", {**files, "mlp_onnx": {"config.pbtxt": ONNX_CONFIG}})
    return repo, build_onnx(repo / "mlp_onnx" / "1" / "model.onnx")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_bad_new_version_never_takes_the_serving_one_down(tmp_path, workers):
    repo, onnx_answer = repository(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    faults = [*FAULTS, Fault("mlp_onnx", 0, "Protobuf parsing failed")]
    if os.geteuid() == 0 and shutil.which("setpriv") is None:  # nothing can deny root a read here
        faults = [f for f in faults if f.model != "permission_denied"]
    failing = [f for f in faults if f.model != "removed_while_loading"]
    args = ["--model-control-mode=poll", "--repository-poll-secs=0.5", f"--workers={workers}"]
    times = 4 * workers  # index checks in a row over new connections: with 2 workers, both answer
    srv = UnprivilegedServer([repo], args).start(timeout=180)
    try:
        with Traffic(srv, faults, onnx_answer) as traffic:
            for fault in faults:
                break_version_2(repo, fault, markers)
            # The version that loads while its files are removed: remove them once it is loading.
            wait_for(lambda: (markers / "removed_while_loading").exists(), "version 2 loading", log=srv.log)
            shutil.rmtree(repo / "removed_while_loading" / "2")

            for fault in failing:
                wait_for(lambda f=fault: agreed(lambda: v2_failed(srv, f), times), f"{fault.model} failed", log=srv.log)
            assert agreed(lambda: ready(srv), times), srv.log()[-6000:]
            records = log_records(srv)
            for fault in faults:  # a WARNING names the model, the version and the reason
                start = f"model '{fault.model}' version 2 failed to load: "
                assert any(
                    r.startswith("W") and start in r and fault.reason in r and r.endswith("; still serving version 1")
                    for r in records
                ), (fault.model, srv.log()[-6000:])
            assert not [r for r in records if "versions none ready" in r]
            traffic.wait_rounds(2)  # requests were answered while every version 2 was broken

            fixed = {f.model for f in faults if f.fixed}
            traffic.unpinned |= fixed  # their version 1 goes once version 2 is READY
            traffic.wait_rounds(1)
            traffic.replaced |= fixed
            for fault in faults:
                recover(repo, fault)
            for fault in faults:
                wait_for(lambda f=fault: agreed(lambda: recovered(srv, f), times), f"{fault.model} back", log=srv.log)
            assert agreed(lambda: ready(srv), times)
            traffic.wait_rounds(2)
        assert traffic.failures == [], traffic.failures[:10]
        assert min(traffic.sent.values()) >= 4 * len(faults), traffic.sent
        client = fresh_http(srv)
        for fault in faults:
            if fault.fixed:
                assert client.get_model_metadata(fault.model)["versions"] == ["2"]
    finally:
        srv.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_explicit_load_of_a_bad_new_version_answers_400_and_keeps_the_old_one(tmp_path, workers):
    fault = dataclasses.replace(FAULTS[1], fixed=False)  # initialize raises; removed, not fixed
    broken = model_py(0, init="raise RuntimeError('initialize failed on purpose')")
    repo = write_repository(
        tmp_path / "models",
        {
            fault.model: {"config.pbtxt": CONFIG, "1/model.py": model_py(201)},
            "never_served": {"config.pbtxt": CONFIG, "1/model.py": broken},
        },
    )
    args = ["--model-control-mode=explicit", f"--load-model={fault.model}", f"--workers={workers}"]
    times = 4 * workers
    with ServerProcess([repo], args) as srv, Traffic(srv, [fault]) as traffic:
        break_version_2(repo, fault, tmp_path)
        client = fresh_http(srv)
        with pytest.raises(InferenceServerException) as err:
            client.load_model(fault.model)
        assert err.value.status() == "400"
        assert str(err.value.message()).startswith(
            f"load failed for model '{fault.model}': version 2 is at UNAVAILABLE state: "
        )
        assert fault.reason in err.value.message()
        assert agreed(lambda: v2_failed(srv, fault), times)
        assert agreed(lambda: ready(srv), times)
        shutil.rmtree(repo / fault.model / "2")
        client.load_model(fault.model)
        assert agreed(lambda: recovered(srv, fault), times)

        # A model none of whose versions serves keeps the server not ready, until it loads.
        with pytest.raises(InferenceServerException):
            client.load_model("never_served")
        assert agreed(lambda: not ready(srv), times)
        put(repo / "never_served" / "1" / "model.py", model_py(1))
        client.load_model("never_served")
        assert agreed(lambda: ready(srv), times)
        traffic.wait_rounds(2)
    assert traffic.failures == [], traffic.failures[:10]


def test_issue_42_a_new_onnx_version_that_does_not_parse_leaves_version_1_serving(tmp_path):
    repo = write_repository(tmp_path / "models", {"mlp_onnx": {"config.pbtxt": ONNX_CONFIG}})
    answer = build_onnx(repo / "mlp_onnx" / "1" / "model.onnx")
    v1 = {"name": "mlp_onnx", "version": "1", "state": "READY"}
    with ServerProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=0.5"]) as srv:
        client = fresh_http(srv)
        (repo / "mlp_onnx" / "2").mkdir()
        (repo / "mlp_onnx" / "2" / "model.onnx").write_text("not an onnx file\n")
        wait_for(
            lambda: len(rows(srv, "mlp_onnx")) == 2 and srv.log().count("mlp_onnx' versions") == 2, "v2", log=srv.log
        )
        first, second = rows(srv, "mlp_onnx")
        assert first == v1
        assert second["version"] == "2" and second["state"] == "UNAVAILABLE"
        assert second["reason"].startswith("unable to load model 'mlp_onnx': onnxruntime cannot load ")
        assert second["reason"].endswith("model.onnx': Protobuf parsing failed.")
        np.testing.assert_allclose(Traffic._ask(httpclient, client, "mlp_onnx", ""), answer, rtol=1e-5)
        assert ready(srv)

        shutil.rmtree(repo / "mlp_onnx" / "2")
        wait_for(lambda: rows(srv, "mlp_onnx") == [v1], "the row of version 2 gone", log=srv.log)
        assert ready(srv)
        np.testing.assert_allclose(Traffic._ask(httpclient, client, "mlp_onnx", "1"), answer, rtol=1e-5)
