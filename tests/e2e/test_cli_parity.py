"""Triton's command line on a real ``inferd serve``: --strict-readiness, --exit-on-error,
--exit-timeout-secs, --backend-config, Triton's other flags and mistyped ones.

Behaviour checked against tritonserver 2.51 (../shared/triton): a repository with a model whose
initialize() raises makes it exit 1 with "error: creating server: Internal - failed to load all
models" (modes none and poll; in explicit mode with --load-model of it, or of a model in no
repository); with --exit-on-error=false it serves and /v2/health/ready answers 400 (gRPC
ServerReady false) until the model loads; a failed API load makes the server unready, and
unloading that model does not make it ready again; a failed reload leaves it ready (the old
version serves). Past --exit-timeout-secs with an execution still running it logs "failed to stop
server: Internal - Exit timeout expired. Exiting immediately." and exits 1. Its --backend-config
format errors are the ones asserted in tests/core/test_flags.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gevent
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.sockets import listening_addresses
from tests.waiting import wait_for

BROKEN_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom at initialize")

    def execute(self, requests):
        return []
"""


def _repository(root: Path, broken: bool = True) -> Path:
    repo = {"good": models.add_sub()}
    if broken:
        repo["broken"] = models.simple(models.ADD_SUB_CONFIG, BROKEN_PY)
    return write_repository(root / "models", repo)


def _run(repo: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``inferd serve`` to its exit (it is expected to exit by itself)."""
    cmd = ServerProcess([repo], args).command()
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ})


@contextmanager
def _started(repositories: list[Path], args: list[str]) -> Iterator[ServerProcess]:
    """A server that is live, ready or not (``ServerProcess`` as a context manager waits for ready)."""
    srv = ServerProcess(repositories, args).start(wait_ready=False)
    try:
        yield srv
    finally:
        srv.stop()


def _readiness(srv: ServerProcess) -> tuple[bool, bool]:
    """(HTTP, gRPC) server readiness, as tritonclient reports it."""
    http = httpclient.InferenceServerClient(srv.http_url)
    with grpcclient.InferenceServerClient(srv.grpc_url) as grpc:
        return http.is_server_ready(), grpc.is_server_ready()


# -- --exit-on-error --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_a_model_failing_at_start_up_stops_the_server(tmp_path, mode):
    done = _run(_repository(tmp_path), f"--model-control-mode={mode}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: creating server: Internal - failed to load all models: failed to load 'broken': ")
    assert "boom at initialize" in last and "'good'" not in last


def test_explicit_mode_exits_for_the_load_models_named(tmp_path):
    repo = _repository(tmp_path)
    done = _run(repo, "--model-control-mode=explicit", "--load-model=good", "--load-model=broken")
    assert done.returncode == 1
    assert "failed to load all models: failed to load 'broken': " in done.stderr
    done = _run(repo, "--model-control-mode=explicit", "--load-model=nosuch")
    assert done.returncode == 1
    assert ("failed to load all models: failed to load 'nosuch', failed to poll from model repository"
            in done.stderr)  # fmt: skip


# -- --strict-readiness -----------------------------------------------------------------------------


def test_not_ready_while_a_model_that_should_be_loaded_failed(tmp_path):
    with _started([_repository(tmp_path)], ["--exit-on-error=false"]) as srv:
        assert _readiness(srv) == (False, False)
        http = httpclient.InferenceServerClient(srv.http_url)
        assert http.is_server_live() and http.is_model_ready("good") and not http.is_model_ready("broken")
        assert "failed to load all models: failed to load 'broken'" in srv.log()


def test_strict_readiness_false_is_ready_with_a_broken_model(tmp_path):
    args = ["--exit-on-error=false", "--strict-readiness", "false"]
    with ServerProcess([_repository(tmp_path)], args) as srv:
        assert _readiness(srv) == (True, True)


def test_explicit_mode_counts_the_models_loaded_through_the_api(tmp_path):
    repo = _repository(tmp_path)
    args = ["--model-control-mode=explicit", "--load-model=good"]
    with ServerProcess([repo], args) as srv:  # 'broken' is in the repository, never asked for: ready
        http = httpclient.InferenceServerClient(srv.http_url)
        assert _readiness(srv) == (True, True)
        with pytest.raises(InferenceServerException, match="load failed for model 'broken'"):
            http.load_model("broken")
        assert _readiness(srv) == (False, False)
        http.unload_model("broken")  # as Triton: the failed load still counts
        assert _readiness(srv) == (False, False)
        (repo / "broken" / "1" / "model.py").write_text(models.add_sub_py(0))
        http.load_model("broken")
        assert _readiness(srv) == (True, True)
        (repo / "good" / "1" / "model.py").write_text(BROKEN_PY)
        with pytest.raises(InferenceServerException, match="load failed for model 'good'"):
            http.load_model("good")  # a failed reload: the old version serves, READY (as Triton)
        assert _readiness(srv) == (True, True) and http.is_model_ready("good")
        http.unload_model("good")  # unloaded on purpose: does not count
        wait_for(lambda: not http.is_model_ready("good"), "good to unload")
        assert _readiness(srv) == (True, True)


def test_workers_exit_on_error_too(tmp_path):
    done = _run(_repository(tmp_path), "--workers", "2")
    assert done.returncode == 1
    assert "failed to load all models: failed to load 'broken'" in done.stderr


def test_workers_are_ready_only_together_and_strictly(tmp_path):
    with _started([_repository(tmp_path)], ["--workers", "2", "--exit-on-error=false"]) as srv:
        wait_for(lambda: "all 2 workers ready" in srv.log(), "both workers to start")
        assert _readiness(srv) == (False, False)
        assert httpclient.InferenceServerClient(srv.http_url).is_model_ready("good")


# -- --exit-timeout-secs ----------------------------------------------------------------------------


#: The slow model, saying when it executes: it creates ``executing`` beside its ``model.py`` first.
MARKED_SLOW_PY = models.SLOW_PY.replace(
    "    def execute(self, requests):\n",
    "    def initialize(self, args):\n"
    "        import os\n"
    "        self.marker = os.path.join(args['model_repository'], args['model_version'], 'executing')\n\n"
    "    def execute(self, requests):\n"
    "        open(self.marker, 'w').close()\n",
)


def test_exit_timeout_bounds_the_drain_at_shutdown(tmp_path):
    repo = write_repository(tmp_path / "models", {"slow": models.simple(models.SLOW_CONFIG, MARKED_SLOW_PY)})
    with ServerProcess([repo], ["--exit-timeout-secs", "1"]) as srv:  # stopped even when a check fails
        client = httpclient.InferenceServerClient(srv.http_url)
        inp = httpclient.InferInput("MS", [1], "INT32")
        inp.set_data_from_numpy(np.array([20000], np.int32))
        client.async_infer("slow", [inp])
        marker, deadline = repo / "slow" / "1" / "executing", time.monotonic() + 60
        while not marker.exists():  # the request is executing (statistics would count it only once it ends)
            assert time.monotonic() < deadline, "the slow request never started executing"
            gevent.sleep(0.05)  # the client sends from a greenlet: it runs only while gevent's hub has control
        stopped = time.monotonic()
        os.kill(srv.proc.pid, signal.SIGTERM)
        assert srv.proc.wait(30) == 1  # Triton's exit code when the timeout expires
        assert time.monotonic() - stopped < 6  # about the 1 s timeout (and the unload's 1 s), not the request's 20 s
    assert "failed to stop server: Internal - Exit timeout expired. Exiting immediately." in srv.log()


# -- Triton's other flags ---------------------------------------------------------------------------

TRITON_HELM_ARGS = [
    "--id=triton-edge", "--grpc-address=127.0.0.2", "--http-thread-count", "8", "--reuse-grpc-port=true",
    "--grpc-keepalive-time=7200000", "--grpc-keepalive-permit-without-calls", "1", "--rate-limit=execution_count",
    "--pinned-memory-pool-byte-size=268435456", "--cuda-memory-pool-byte-size", "0:67108864",
    "--backend-directory=/opt/tritonserver/backends", "--allow-sagemaker=false", "--grpc-use-ssl=false",
    "--backend-config=tensorflow,version=2", "--backend-config=python,shm-default-byte-size=1048576",
]  # fmt: skip


def test_triton_command_lines_run_with_one_warning_per_flag_that_does_not_apply(tmp_path):
    with ServerProcess([_repository(tmp_path, broken=False)], TRITON_HELM_ARGS) as srv:
        assert httpclient.InferenceServerClient(srv.http_url).get_server_metadata()["name"] == "triton-edge"
        with grpcclient.InferenceServerClient(f"127.0.0.2:{srv.grpc_port}") as grpc:  # --grpc-address
            assert grpc.is_server_ready() and grpc.get_server_metadata().name == "triton-edge"
        # not on the HTTP address (read from its own sockets: another test's server may hold the
        # same port number on 127.0.0.1, which a connection would reach)
        assert srv.proc is not None
        listening = listening_addresses(srv.proc.pid)
        assert ("127.0.0.2", srv.grpc_port) in listening and ("127.0.0.1", srv.grpc_port) not in listening
        log = srv.log()
    ignored = [line for line in log.splitlines() if "does not apply to inferd (ignored)" in line]
    assert [line.split("] ", 1)[1].split(" ", 1)[0] for line in ignored] == [
        "--http-thread-count=8",
        "--reuse-grpc-port=true",
        "--grpc-keepalive-time=7200000",
        "--grpc-keepalive-permit-without-calls=1",
        "--allow-sagemaker=false",
        "--backend-directory=/opt/tritonserver/backends",
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size=0:67108864",
    ]  # fmt: skip  (--rate-limit is a real flag)  (in the order of `tritonserver --help`)
    assert "--backend-config=tensorflow,version=2: no installed backend is named 'tensorflow'; ignored" in log


def test_a_mistyped_flag_suggests_the_closest_and_exits_2(tmp_path):
    done = _run(tmp_path, "--strict-readyness=false")
    assert done.returncode == 2
    assert "unrecognized arguments: --strict-readyness=false (did you mean --strict-readiness?)" in done.stderr
    done = _run(tmp_path, "--exit-on-eror", "false")
    assert done.returncode == 2 and "(did you mean --exit-on-error?)" in done.stderr


def test_security_flags_that_cannot_be_honoured_are_refused(tmp_path):
    assert _run(tmp_path, "--grpc-use-ssl", "true").returncode == 2


# -- --backend-config -------------------------------------------------------------------------------


def _onnx_repository(root: Path) -> Path:
    """An ONNX model with a batch dimension and no config.pbtxt: auto-complete decides max_batch_size."""
    pytest.importorskip("onnxruntime")
    from tests.plugins.backend_onnx import models as onnx_models

    return write_repository(
        root / "models", {"auto": {"1/model.onnx": lambda p: onnx_models.save(onnx_models.add_matmul(), p)}}
    )


def _configs(srv: ServerProcess, model: str) -> tuple[dict, object]:
    http = httpclient.InferenceServerClient(srv.http_url)
    with grpcclient.InferenceServerClient(srv.grpc_url) as grpc:
        return http.get_model_config(model), grpc.get_model_config(model).config


def test_default_max_batch_size_reaches_autocomplete_backend_setting_over_global(tmp_path):
    args = ["--backend-config=default-max-batch-size=7", "--backend-config", "onnxruntime,default-max-batch-size=5"]
    with ServerProcess([_onnx_repository(tmp_path)], args) as srv:
        http_config, grpc_config = _configs(srv, "auto")
    assert http_config["max_batch_size"] == 5 and "dynamic_batching" in http_config
    assert grpc_config.max_batch_size == 5 and grpc_config.HasField("dynamic_batching")


def test_default_max_batch_size_zero_turns_batching_off(tmp_path):
    with ServerProcess([_onnx_repository(tmp_path)], ["--backend-config=default-max-batch-size=0"]) as srv:
        http_config, grpc_config = _configs(srv, "auto")
    assert http_config["max_batch_size"] == 0 and "dynamic_batching" not in http_config
    assert grpc_config.max_batch_size == 0 and not grpc_config.HasField("dynamic_batching")


def test_a_bad_backend_setting_fails_the_models_of_that_backend(tmp_path):
    done = _run(_onnx_repository(tmp_path), "--backend-config=onnxruntime,default-max-batch-size=many")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "failed to load all models: failed to load 'auto': " in last
    assert "--backend-config=onnxruntime,default-max-batch-size=many: expected a whole number" in last


def test_onnxruntime_global_thread_pool_serves(tmp_path):
    args = [
        "--backend-config=onnxruntime,enable-global-threadpool=1",
        "--backend-config=onnxruntime,intra_op_thread_count=1",
    ]
    with ServerProcess([_onnx_repository(tmp_path)], args) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        inputs = [httpclient.InferInput("A", [2, 4], "FP32"), httpclient.InferInput("B", [2, 4], "FP32")]
        for inp in inputs:
            inp.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("auto", inputs).as_numpy("SUM"), a + a)
        assert "onnxruntime global thread pools: intra_op_thread_count=1, inter_op_thread_count=default" in srv.log()


PYTORCH_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "INTRA_OP_THREAD_COUNT" value { string_value: "3" } }
"""


def test_pytorch_thread_counts_from_backend_config_win_over_the_models(tmp_path):
    pytest.importorskip("torch")
    from tests.plugins.backend_pytorch.models import AddSub, save_script

    repo = write_repository(tmp_path / "models", {"add_sub": {"config.pbtxt": PYTORCH_CONFIG,
                                                              "1/model.pt": lambda p: save_script(AddSub(), p)}})  # fmt: skip
    with ServerProcess([repo], ["--backend-config=pytorch,intra_op_thread_count=2"]) as srv:
        assert httpclient.InferenceServerClient(srv.http_url).is_model_ready("add_sub")
        log = srv.log()
    assert "--backend-config=pytorch: INTRA_OP_THREAD_COUNT set to 2 for the whole process" in log
    assert ("model 'add_sub': INTRA_OP_THREAD_COUNT 3 ignored; it is process-wide and --backend-config=pytorch "
            "already set it to 2") in log  # fmt: skip
