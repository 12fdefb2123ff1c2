"""Sequence models on the onnxruntime backend: control tensors and implicit state, end to end.

The configs are shaped like NVIDIA's ``simple_sequence`` (START and READY controls, the direct
strategy) and ``simple_dyna_sequence`` (START, END, READY and a UINT64 CORRID, the oldest
strategy); ``accumulate`` keeps its running sum in implicit state (``sequence_batching.state``).
One real ``inferd serve`` serves them for the module; expected values are computed here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from inferd.config import ModelConfig
from inferd.config.parse import parse_config_text
from inferd.testing import ServerProcess
from inferd_backend_onnx.signature import GraphTensor, autocomplete, check_config, run_output_names

from . import models as m

INT32 = TensorProto.INT32
CONTROL = "control [ {{ kind: {kind} int32_false_true: [ 0, 1 ] }} ]"
IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def _control(name: str, kind: str) -> str:
    return f'{{ name: "{name}" {CONTROL.format(kind=kind)} }}'


SIMPLE_SEQUENCE = f"""
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  control_input [ {_control("START", "CONTROL_SEQUENCE_START")}, {_control("READY", "CONTROL_SEQUENCE_READY")} ]
}}
{IO}"""

SIMPLE_DYNA_SEQUENCE = f"""
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  oldest {{ max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START")}, {_control("END", "CONTROL_SEQUENCE_END")},
    {_control("READY", "CONTROL_SEQUENCE_READY")},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
{IO}"""

ACCUMULATE = f"""
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  control_input [ {_control("START", "CONTROL_SEQUENCE_START")}, {_control("READY", "CONTROL_SEQUENCE_READY")} ]
  state [ {{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
}}
{IO}"""

#: START names a tensor the graph does not have: the load must fail and say so.
BAD_CONTROL = SIMPLE_SEQUENCE.replace('name: "START"', 'name: "BEGIN"')


def _const(name: str, value: int) -> object:
    return numpy_helper.from_array(np.array([value], np.int32), name)


def _vi(name: str, elem: int = INT32) -> object:
    return m.vi(name, elem, ["batch", 1])


def simple_sequence_model() -> object:
    """OUTPUT = INPUT * READY + 1000 * START."""
    nodes = [
        helper.make_node("Mul", ["INPUT", "READY"], ["masked"]),
        helper.make_node("Mul", ["START", "K1000"], ["start_mark"]),
        helper.make_node("Add", ["masked", "start_mark"], ["OUTPUT"]),
    ]
    inputs = [_vi("INPUT"), _vi("START"), _vi("READY")]
    return m.make_model(nodes, inputs, [_vi("OUTPUT")], [_const("K1000", 1000)])


def dyna_sequence_model() -> object:
    """OUTPUT = INPUT + 1000 * START + 100 * END + 10000 * CORRID (READY is an input, unused)."""
    nodes = [
        helper.make_node("Cast", ["CORRID"], ["corrid32"], to=INT32),
        helper.make_node("Mul", ["corrid32", "K10000"], ["corrid_mark"]),
        helper.make_node("Mul", ["START", "K1000"], ["start_mark"]),
        helper.make_node("Mul", ["END", "K100"], ["end_mark"]),
        helper.make_node("Add", ["INPUT", "corrid_mark"], ["s1"]),
        helper.make_node("Add", ["s1", "start_mark"], ["s2"]),
        helper.make_node("Add", ["s2", "end_mark"], ["s3"]),
        helper.make_node("Mul", ["READY", "K0"], ["ready0"]),
        helper.make_node("Add", ["s3", "ready0"], ["OUTPUT"]),
    ]
    inputs = [_vi("INPUT"), _vi("START"), _vi("END"), _vi("READY"), _vi("CORRID", TensorProto.UINT64)]
    consts = [_const("K10000", 10000), _const("K1000", 1000), _const("K100", 100), _const("K0", 0)]
    return m.make_model(nodes, inputs, [_vi("OUTPUT")], consts)


def accumulate_model() -> object:
    """OUTPUT = ACC_OUT = ACC_IN * (1 - START) + INPUT: a running sum that restarts at START."""
    nodes = [
        helper.make_node("Sub", ["K1", "START"], ["keep"]),
        helper.make_node("Mul", ["ACC_IN", "keep"], ["kept"]),
        helper.make_node("Add", ["kept", "INPUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
    ]
    inputs = [_vi("INPUT"), _vi("START"), _vi("READY"), _vi("ACC_IN")]
    return m.make_model(nodes, inputs, [_vi("OUTPUT"), _vi("ACC_OUT")], [_const("K1", 1)])


MODELS = {
    "simple_sequence": (SIMPLE_SEQUENCE, simple_sequence_model),
    "simple_dyna_sequence": (SIMPLE_DYNA_SEQUENCE, dyna_sequence_model),
    "accumulate": (ACCUMULATE, accumulate_model),
    "bad_control": (BAD_CONTROL, simple_sequence_model),
}
GOOD = ["simple_sequence", "simple_dyna_sequence", "accumulate"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve) -> ServerProcess:
    repo: Path = tmp_path_factory.mktemp("sequence_models")
    for name, (config, build) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
        m.save(build(), repo / name / "1" / "model.onnx")
    loads = [f"--load-model={n}" for n in GOOD]
    return serve(repo, "--model-control-mode=explicit", *loads)


def _http_step(
    client: httpclient.InferenceServerClient, model: str, value: int, seq: int, start: bool, end: bool
) -> int:
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start, sequence_end=end)
    out = result.as_numpy("OUTPUT")
    assert out.shape == (1, 1) and out.dtype == np.int32
    return int(out[0, 0])


def _grpc_step(
    client: grpcclient.InferenceServerClient, model: str, value: int, seq: int, start: bool, end: bool
) -> int:
    tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    result = client.infer(model, [tensor], sequence_id=seq, sequence_start=start, sequence_end=end)
    return int(result.as_numpy("OUTPUT")[0, 0])


def _run(step, client, model: str, values: list[int], seq: int) -> list[int]:  # type: ignore[no-untyped-def]
    last = len(values) - 1
    return [step(client, model, v, seq, i == 0, i == last) for i, v in enumerate(values)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_simple_sequence_sees_start_and_ready(server: ServerProcess, protocol: str) -> None:
    client, step = _client(server, protocol)
    values = [5, 7, 9]
    assert _run(step, client, "simple_sequence", values, seq=11) == [1005, 7, 9]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_dyna_sequence_sees_start_end_and_corrid(server: ServerProcess, protocol: str) -> None:
    client, step = _client(server, protocol)
    got = _run(step, client, "simple_dyna_sequence", [1, 2, 3], seq=3)
    assert got == [30000 + 1 + 1000, 30000 + 2, 30000 + 3 + 100]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_implicit_state_accumulates_per_sequence(server: ServerProcess, protocol: str) -> None:
    client, step = _client(server, protocol)
    a, b = [1, 2, 3, 4], [10, 20, 30]
    got_a, got_b = [], []
    for i in range(len(a)):  # two sequences interleaved: each keeps its own state
        got_a.append(step(client, "accumulate", a[i], 101, i == 0, i == len(a) - 1))
        if i < len(b):
            got_b.append(step(client, "accumulate", b[i], 202, i == 0, i == len(b) - 1))
    assert got_a == list(np.cumsum(a)) and got_b == list(np.cumsum(b))
    # A new sequence with the same id starts from the initial (zero) state again.
    assert _run(step, client, "accumulate", [7, 8], seq=101) == [7, 15]


def test_state_output_is_not_returned(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[4]], np.int32))
    result = client.infer("accumulate", [tensor], sequence_id=5, sequence_start=True, sequence_end=True)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT"]
    meta = client.get_model_metadata("accumulate")
    assert [i["name"] for i in meta["inputs"]] == ["INPUT"]


def test_missing_control_fails_the_load_and_server_stays_up(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as err:
        client.load_model("bad_control")
    text = str(err.value)
    assert "load failed for model 'bad_control'" in text and "'BEGIN'" in text and "START" in text
    assert client.is_server_live() and client.is_model_ready("simple_sequence")


def test_request_without_sequence_id_is_refused(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], np.int32))
    with pytest.raises(InferenceServerException) as err:
        client.infer("accumulate", [tensor])
    assert "accumulate" in str(err.value) and "correlation ID" in str(err.value)


def _client(server: ServerProcess, protocol: str):  # type: ignore[no-untyped-def]
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url), _http_step
    return grpcclient.InferenceServerClient(server.grpc_url), _grpc_step


# -- the config-vs-graph rules, without a session ------------------------------------------------


def _infos(*names: str, elem: str = "TYPE_INT32") -> list[GraphTensor]:
    return [GraphTensor(n, elem, (-1, 1), "tensor(int32)") for n in names]


def _config(text: str) -> ModelConfig:
    return parse_config_text(f'name: "s"\n{text}', "test")


def test_check_config_counts_controls_and_state_as_inputs_and_outputs() -> None:
    config = _config(ACCUMULATE)
    check_config(config, "s", _infos("INPUT", "START", "READY", "ACC_IN"), _infos("OUTPUT", "ACC_OUT"))
    assert run_output_names(config) == ["OUTPUT", "ACC_OUT"]


def test_check_config_names_a_missing_state_output_and_a_wrong_control_type() -> None:
    config = _config(ACCUMULATE)
    with pytest.raises(Exception, match="sequence state output 'ACC_OUT'.*model outputs: OUTPUT"):
        check_config(config, "s", _infos("INPUT", "START", "READY", "ACC_IN"), _infos("OUTPUT"))
    fp32_start = [*_infos("INPUT", "READY", "ACC_IN"), *_infos("START", elem="TYPE_FP32")]
    with pytest.raises(Exception, match="'START' is TYPE_INT32 in sequence_batching, model provides TYPE_FP32"):
        check_config(config, "s", fp32_start, _infos("OUTPUT", "ACC_OUT"))


def test_autocomplete_leaves_out_what_the_sequence_batcher_feeds() -> None:
    config = _config(ACCUMULATE.replace(IO, ""))
    graph_in, graph_out = _infos("INPUT", "START", "READY", "ACC_IN"), _infos("OUTPUT", "ACC_OUT")
    autocomplete(config, "s", graph_in, graph_out, default_max_batch_size=4)
    assert [t.name for t in config.input] == ["INPUT"] and [t.name for t in config.output] == ["OUTPUT"]
    check_config(config, "s", graph_in, graph_out)
