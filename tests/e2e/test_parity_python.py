"""Python models as Triton's QA runs them (``qa/python_models``), and how their error responses
count in the statistics, end to end against a real ``inferd serve``.

Expectations are what Triton 2.51 (CPU, Python backend) did with the same models: the
``initialize`` arguments of an instance (``init_args``), a torch model (``pytorch_fp32_fp32``),
and an error response (``InferenceResponse(error=...)``, returned or sent) counted as a success
(``inference_count`` and ``success`` grow, ``fail`` does not), unlike a raised exception.
"""

from __future__ import annotations

import importlib.util
import queue
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

# Checks what Triton passes to initialize(), as qa/python_models/init_args does.
INIT_ARGS = """
import numpy as np
import triton_python_backend_utils as pb_utils

EXPECTED = {expected!r}


class TritonPythonModel:
    def initialize(self, args):
        for key, value in EXPECTED.items():
            if args[key] != value:
                raise pb_utils.TritonModelException(f"{{key}}: expected {{value!r}}, got {{args[key]!r}}")
        self.keys = len(args)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([self.keys], np.float32))]) for _ in requests]
"""
INIT_ARGS_CONFIG = """
backend: "python"
max_batch_size: 64
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

TORCH_NET = source("parity_python_torch_net")
TORCH_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1, 1, 28, 28 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1, 10 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# An error response for negative inputs: returned, or sent through the response sender.
ERRORS = source("parity_python_errors")


def _errors_config(head: str) -> str:
    return (
        head
        + """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
    )


HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root: Path = tmp_path_factory.mktemp("python") / "models"
    expected = {
        "model_name": "init_args",
        "model_instance_name": "init_args_0_0",
        "model_instance_kind": "CPU",
        "model_instance_device_id": "0",
        "model_version": "1",
        "model_repository": str(root / "init_args"),
    }
    models = {
        "init_args": {"config.pbtxt": INIT_ARGS_CONFIG, "1/model.py": INIT_ARGS.format(expected=expected)},
        "err_plain": {"config.pbtxt": _errors_config('backend: "python"\nmax_batch_size: 0'), "1/model.py": ERRORS},
        "err_batched": {
            "config.pbtxt": _errors_config(
                'backend: "python"\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 300000 }'
            ),
            "1/model.py": ERRORS,
        },
        "err_decoupled": {
            "config.pbtxt": _errors_config(
                'backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }'
            ),
            "1/model.py": ERRORS,
        },
    }
    if HAS_TORCH:
        models["pytorch_fp32_fp32"] = {"config.pbtxt": TORCH_CONFIG, "1/model.py": TORCH_NET}
    return serve(write_repository(root, models))


def _stats(server: ServerProcess, model: str) -> dict[str, int]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        s = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    infer = s["inference_stats"]
    return {
        "inference_count": s["inference_count"],
        "success": infer["success"]["count"],
        "fail": infer["fail"]["count"],
    }


def _infer(server: ServerProcess, model: str, name: str, array: np.ndarray) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        inp = httpclient.InferInput(name, list(array.shape), "FP32")
        inp.set_data_from_numpy(array)
        result = client.infer(model, [inp])
        return result.as_numpy(result.get_response()["outputs"][0]["name"])
    finally:
        client.close()


def test_init_args_are_what_triton_passes(server):
    # All seven keys Triton passes; the model checked their values when it loaded.
    assert _infer(server, "init_args", "IN", np.zeros((2, 2), np.float32)).tolist() == [7.0]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_torch_model_loads_and_infers(server):
    out = _infer(server, "pytorch_fp32_fp32", "IN", np.zeros((1, 1, 28, 28), np.float32))
    assert out.shape == (1, 10)
    assert np.isclose(np.exp(out).sum(), 1.0, atol=1e-4)


def test_error_response_counts_as_a_success(server):
    # Triton 2.51: one error response and one response -> inference_count 2, success 2, fail 0.
    # inferd before: inference_count 1, success 1, fail 1.
    with pytest.raises(InferenceServerException, match="negative input"):
        _infer(server, "err_plain", "INPUT0", np.full(2, -1, np.float32))
    _infer(server, "err_plain", "INPUT0", np.ones(2, np.float32))
    assert _stats(server, "err_plain") == {"inference_count": 2, "success": 2, "fail": 0}


def test_error_responses_in_one_batch_count_as_successes(server):
    # Triton 2.51: three requests in one execution, two answered with errors -> 3, 3, 0.
    results: list[object] = []

    def call(value: float) -> None:
        try:
            results.append(_infer(server, "err_batched", "INPUT0", np.full((1, 2), value, np.float32)))
        except InferenceServerException as exc:
            results.append(exc)

    threads = [threading.Thread(target=call, args=(v,)) for v in (-1.0, 1.0, -1.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(isinstance(r, InferenceServerException) for r in results) == 2
    assert _stats(server, "err_batched") == {"inference_count": 3, "success": 3, "fail": 0}


def test_decoupled_error_response_counts_as_a_success(server):
    # Triton 2.51: an error response sent with the FINAL flag -> success, not fail.
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: responses.put(error))
        for value in (-1.0, 1.0):
            inp = grpcclient.InferInput("INPUT0", [2], "FP32")
            inp.set_data_from_numpy(np.full(2, value, np.float32))
            client.async_stream_infer("err_decoupled", [inp])
        errors = [responses.get(timeout=30) for _ in range(2)]
    finally:
        client.stop_stream()
        client.close()
    assert sum(e is not None for e in errors) == 1
    assert _stats(server, "err_decoupled") == {"inference_count": 2, "success": 2, "fail": 0}
