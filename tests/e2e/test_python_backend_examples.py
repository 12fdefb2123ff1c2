"""NVIDIA python_backend's examples (add_sub, BLS sync/async, BLS of a decoupled model sync/async,
decoupled repeat/square, custom metrics, auto-complete) on a real ``inferd serve``, in-process and
isolated (``EXECUTION_MODE: process``): the same models, the same answers.

The models are written here after the examples in github.com/triton-inference-server/python_backend
(``examples/``), keeping their names, tensors and behaviour.
"""

from __future__ import annotations

import queue
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.metrics_text import scrape
from tests.python_models import source
from tests.servers import Servers

ADD_SUB_CONFIG = """
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""
ADD_SUB_PY = source("python_backend_examples_add_sub")
BLS_CONFIG = """
backend: "python"
input [ { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
BLS_SYNC_PY = source("python_backend_examples_bls_sync")
# The async example calls two models at once and adds their outputs: here add_sub twice.
BLS_ASYNC_PY = source("python_backend_examples_bls_async")
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""
REPEAT_PY = source("python_backend_examples_repeat")
SQUARE_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: True }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
SQUARE_PY = source("python_backend_examples_square")
BLS_DECOUPLED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
BLS_DECOUPLED_SYNC_PY = source("python_backend_examples_bls_decoupled_sync")
BLS_DECOUPLED_ASYNC_PY = source("python_backend_examples_bls_decoupled_async")
CUSTOM_METRICS_PY = source("python_backend_examples_custom_metrics")
AUTO_CONFIG = 'backend: "python"\n'
AUTO_PY = source("python_backend_examples_auto")

MODES = ["in_process", "process"]


def _repository(root, mode: str):
    extra = f'\nparameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{mode}" }} }}\n'

    def model(config: str, code: str) -> dict[str, str]:
        return {"config.pbtxt": textwrap.dedent(config) + extra, "1/model.py": textwrap.dedent(code)}

    return write_repository(
        root,
        {
            "add_sub": model(ADD_SUB_CONFIG, ADD_SUB_PY),
            "bls_sync": model(BLS_CONFIG, BLS_SYNC_PY),
            "bls_async": model(BLS_CONFIG, BLS_ASYNC_PY),
            "repeat_int32": model(REPEAT_CONFIG, REPEAT_PY),
            "square_int32": model(SQUARE_CONFIG, SQUARE_PY),
            "bls_decoupled_sync": model(BLS_DECOUPLED_CONFIG, BLS_DECOUPLED_SYNC_PY),
            "bls_decoupled_async": model(BLS_DECOUPLED_CONFIG, BLS_DECOUPLED_ASYNC_PY),
            "custom_metrics": model(ADD_SUB_CONFIG, CUSTOM_METRICS_PY),
            "batch_model": model(AUTO_CONFIG, AUTO_PY),
            "nobatch_model": model(AUTO_CONFIG, AUTO_PY.replace("BATCH = True", "BATCH = False")),
        },
    )


@pytest.fixture(scope="module", params=MODES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, serve: Servers
) -> Iterator[ServerProcess]:
    repo = _repository(tmp_path_factory.mktemp(f"pyex-{request.param}") / "models", request.param)
    with serve(repo) as srv:
        srv.mode = request.param
        yield srv


def _add_sub_inputs(module, shape=(4,), name: str | None = None):
    a = np.arange(4, dtype=np.float32).reshape(shape)
    b = np.full(shape, 10, np.float32)
    inputs = []
    if name is not None:
        m = module.InferInput("MODEL_NAME", [1], "BYTES")
        m.set_data_from_numpy(np.array([name.encode()], np.object_))
        inputs.append(m)
    for tname, value in (("INPUT0", a), ("INPUT1", b)):
        x = module.InferInput(tname, list(shape), "FP32")
        x.set_data_from_numpy(value)
        inputs.append(x)
    return inputs, a, b


def test_every_example_is_ready(server):
    index = httpclient.InferenceServerClient(server.http_url).get_model_repository_index()
    names = ("add_sub", "bls_sync", "bls_async", "repeat_int32", "square_int32", "bls_decoupled_sync",
             "bls_decoupled_async", "custom_metrics", "batch_model", "nobatch_model")  # fmt: skip
    assert {row["name"]: row["state"] for row in index} == dict.fromkeys(names, "READY")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_add_sub(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    inputs, a, b = _add_sub_inputs(module)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("model", ["bls_sync", "bls_async"])
def test_bls(server, model):
    client = httpclient.InferenceServerClient(server.http_url)
    inputs, a, b = _add_sub_inputs(httpclient, name="add_sub")
    result = client.infer(model, inputs)
    times = 2 if model == "bls_async" else 1
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), (a + b) * times)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), (a - b) * times)


def test_bls_of_an_unknown_model_fails_the_request(server):
    client = httpclient.InferenceServerClient(server.http_url)
    inputs, _, _ = _add_sub_inputs(httpclient, name="nope")
    with pytest.raises(Exception, match="Model nope - Error when running inference"):
        client.infer("bls_sync", inputs)


@pytest.mark.parametrize("model", ["bls_decoupled_sync", "bls_decoupled_async"])
def test_bls_of_a_decoupled_model(server, model):
    client = httpclient.InferenceServerClient(server.http_url)
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([4], np.int32))
    assert client.infer(model, [x]).as_numpy("SUM").tolist() == [2 * 4 * 4]


def _stream(server, model: str, inputs) -> list:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    out = []
    try:
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = got.get(timeout=60)
            assert error is None, error
            if result.get_response().parameters["triton_final_response"].bool_param:
                return out
            out.append(result)
    finally:
        client.stop_stream()


def test_decoupled_repeat(server):
    values = np.array([4, 2, 0, 1], np.int32)
    inputs = [grpcclient.InferInput("IN", [4], "INT32"), grpcclient.InferInput("DELAY", [4], "UINT32"),
              grpcclient.InferInput("WAIT", [1], "UINT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(values)
    inputs[1].set_data_from_numpy(np.array([1, 2, 3, 4], np.uint32))
    inputs[2].set_data_from_numpy(np.array([5], np.uint32))
    results = _stream(server, "repeat_int32", inputs)
    assert [int(r.as_numpy("OUT")[0]) for r in results] == values.tolist()
    assert [int(r.as_numpy("IDX")[0]) for r in results] == [0, 1, 2, 3]


@pytest.mark.parametrize("n", [0, 3])
def test_decoupled_square(server, n):
    x = grpcclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([n], np.int32))
    assert [int(r.as_numpy("OUT")[0]) for r in _stream(server, "square_int32", [x])] == [n] * n


def test_custom_metrics(server):
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(3):
        inputs, a, b = _add_sub_inputs(httpclient)
        np.testing.assert_array_equal(client.infer("custom_metrics", inputs).as_numpy("OUTPUT0"), a + b)
    text = scrape(server)
    latency = re.search(r'^requests_process_latency_ns\{model="custom_metrics",version="1"\} (\S+)$', text, re.M)
    assert latency is not None and float(latency.group(1)) >= 3, text
    assert re.search(r'^custom_metrics_requests\{model="custom_metrics"\} 3(\.0)?$', text, re.M), text
    assert "# TYPE requests_process_latency_ns counter" in text


@pytest.mark.parametrize(("model", "batch"), [("batch_model", 4), ("nobatch_model", 0)])
def test_auto_complete(server, model, batch):
    client = httpclient.InferenceServerClient(server.http_url)
    config = client.get_model_config(model)
    assert config["max_batch_size"] == batch
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    assert ("dynamic_batching" in config) == bool(batch)
    shape = (1, 4) if batch else (4,)
    inputs, a, b = _add_sub_inputs(httpclient, shape=shape)
    np.testing.assert_array_equal(client.infer(model, inputs).as_numpy("OUTPUT1"), a - b)


def test_isolated_models_run_in_processes_of_their_own(server):
    """In process mode every example instance is a child process of the server; in-process, none."""
    stubs = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields.get("PPid", "0")) == server.proc.pid and b"inferd_backend_python" in cmdline:
            stubs.append(status.parent.name)
    assert len(stubs) == (10 if server.mode == "process" else 0)
