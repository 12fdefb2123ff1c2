"""The ensemble scheduler: the graph checks in isolation, then real servers called with tritonclient.

Python models compute values the tests check independently; the diamond's branches report when
they ran so that parallelism is asserted from what happened, not from how long it took.
"""

from __future__ import annotations

import json
import queue
import shutil
import textwrap
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.config import parse_config_text
from inferd.contracts.errors import ConfigError
from inferd.schedulers.ensemble.plan import Plan
from inferd.testing import ServerProcess, write_repository
from tests.servers import Servers

# -- models --------------------------------------------------------------------------------------

ADD_SUB = (
    """
    backend: "python"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
    """,
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
            return out
    """,
)

# Y = 2 X; PARAMS = the request parameters it received (JSON), one per row.
PREPROCESS = (
    """
    backend: "python"
    max_batch_size: 8
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                p = np.array([[r.parameters().encode()]] * x.shape[0], dtype=np.object_)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("PARAMS", p)]))
            return out
    """,
)

# Sleeps, then answers Y = X * FACTOR and WHEN = [start, end] (wall clock, seconds).
SLEEPER_CONFIG = """
    backend: "python"
    max_batch_size: 8
    input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "WHEN" data_type: TYPE_FP64 dims: [ 2 ] } ]
    instance_group [ { kind: KIND_CPU count: 2 } ]
    """
SLEEPER_PY = """
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                start = time.time()
                x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                time.sleep(0.5)
                when = np.array([[start, time.time()]] * x.shape[0], dtype=np.float64)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * {factor}),
                                                       pb_utils.Tensor("WHEN", when)]))
            return out
    """

PICKY = (
    """
    backend: "python"
    max_batch_size: 0
    input [ { name: "X" data_type: TYPE_INT64 dims: [ -1 ] } ]
    output [ { name: "Y" data_type: TYPE_INT64 dims: [ -1 ] } ]
    """,
    """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
                if (x < 0).any():
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"negative input {x.min()}")))
                else:
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * 2)]))
            return out
    """,
)

# Decoupled: COUNT responses of TEXT + "-i", then the final flag.
REPEAT = (
    """
    backend: "python"
    max_batch_size: 0
    model_transaction_policy { decoupled: true }
    input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }, { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
    output [ { name: "TEXT_OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            for r in requests:
                sender = r.get_response_sender()
                text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()[0]
                n = int(pb_utils.get_input_tensor_by_name(r, "COUNT").as_numpy()[0])
                for i in range(n):
                    out = np.array([text + b"-" + str(i).encode()], dtype=np.object_)
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", out)]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """,
)

UPPER = (
    """
    backend: "python"
    max_batch_size: 0
    input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
    """,
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array(
                [t.upper() for t in pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()], dtype=np.object_))])
                for r in requests]
    """,
)


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {maps} }}'


def _tensors(kind: str, spec: dict[str, tuple[str, str]]) -> str:
    items = ", ".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, (t, d) in spec.items())
    return f"{kind} [ {items} ]"


def ensemble(inputs: dict, outputs: dict, steps: list[str], max_batch_size: int = 8, extra: str = "") -> str:
    return (
        f'platform: "ensemble"\nmax_batch_size: {max_batch_size}\n{_tensors("input", inputs)}\n'
        f"{_tensors('output', outputs)}\nensemble_scheduling {{ {extra} step [ {', '.join(steps)} ] }}\n"
    )


F4 = ("TYPE_FP32", "[ 4 ]")
W2 = ("TYPE_FP64", "[ 2 ]")
S1 = ("TYPE_STRING", "[ 1 ]")
I1 = ("TYPE_INT32", "[ 1 ]")
LONG = ("TYPE_INT64", "[ -1 ]")

PIPELINE = ensemble(
    {"A": F4, "B": F4}, {"SUM": F4, "DIFF": F4, "P": S1},
    [_step("preprocess", {"X": "A"}, {"Y": "a2", "PARAMS": "P"}),
     _step("add_sub", {"INPUT0": "a2", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"})],
)  # fmt: skip
# Two branches (x2 and x3, each taking 0.5 s) from the same input, joined by add_sub.
DIAMOND = ensemble(
    {"X": F4}, {"SUM": F4, "DIFF": F4, "WHEN_L": W2, "WHEN_R": W2},
    [_step("left", {"X": "X"}, {"Y": "l", "WHEN": "WHEN_L"}),
     _step("right", {"X": "X"}, {"Y": "r", "WHEN": "WHEN_R"}),
     _step("add_sub", {"INPUT0": "l", "INPUT1": "r"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"})],
)  # fmt: skip
NESTED = ensemble(
    {"A": F4, "B": F4}, {"S": F4},
    [_step("pipeline", {"A": "A", "B": "B"}, {"SUM": "S"}, version=1)],
)  # fmt: skip
PICKY_ENS = ensemble(
    {"X": LONG}, {"Y": LONG},
    [_step("picky", {"X": "X"}, {"Y": "mid"}), _step("picky", {"X": "mid"}, {"Y": "Y"})], max_batch_size=0,
)  # fmt: skip
LIMITED = ensemble({"X": F4}, {"Y": F4, "WHEN": W2}, [_step("left", {"X": "X"}, {"Y": "Y", "WHEN": "WHEN"})],
                   extra="max_inflight_requests: 1")  # fmt: skip
# Decoupled step, then a plain step on each of its responses.
STREAMED = ensemble(
    {"T": S1, "C": I1}, {"O": S1},
    [_step("repeat", {"TEXT": "T", "COUNT": "C"}, {"TEXT_OUT": "t"}), _step("upper", {"IN": "t"}, {"OUT": "O"})],
    max_batch_size=0,
)  # fmt: skip

BROKEN = {
    "cyc": ensemble({"A": F4}, {"OUT": F4}, [
        _step("preprocess", {"X": "t2"}, {"Y": "t1"}), _step("preprocess", {"X": "t1"}, {"Y": "t2"}),
        _step("add_sub", {"INPUT0": "A", "INPUT1": "t2"}, {"OUTPUT0": "OUT"})]),
    "unknown_step": ensemble({"A": F4}, {"OUT": F4}, [_step("nope", {"X": "A"}, {"Y": "OUT"})]),
    "dangling": ensemble({"A": F4}, {"OUT": F4}, [
        _step("add_sub", {"INPUT0": "A", "INPUT1": "ghost"}, {"OUTPUT0": "OUT"})]),
    "twice": ensemble({"A": F4}, {"OUT": F4}, [
        _step("preprocess", {"X": "A"}, {"Y": "OUT"}), _step("preprocess", {"X": "A"}, {"Y": "OUT"})]),
    "unproduced": ensemble({"A": F4}, {"OUT": F4, "NOBODY": F4}, [_step("preprocess", {"X": "A"}, {"Y": "OUT"})]),
    "badtype": ensemble({"A": ("TYPE_INT32", "[ 4 ]")}, {"OUT": F4}, [_step("preprocess", {"X": "A"}, {"Y": "OUT"})]),
    "wrong_input": ensemble({"A": F4}, {"OUT": F4}, [_step("preprocess", {"NOPE": "A"}, {"Y": "OUT"})]),
}  # fmt: skip


def python_model(config: str, code: str) -> dict[str, str]:
    return {"config.pbtxt": textwrap.dedent(config), "1/model.py": textwrap.dedent(code)}


def repository(root):
    models = {
        "add_sub": python_model(*ADD_SUB),
        "preprocess": python_model(*PREPROCESS),
        "left": python_model(SLEEPER_CONFIG, SLEEPER_PY.replace("{factor}", "2")),
        "right": python_model(SLEEPER_CONFIG, SLEEPER_PY.replace("{factor}", "3")),
        "picky": python_model(*PICKY),
        "repeat": python_model(*REPEAT),
        "upper": python_model(*UPPER),
        "pipeline": {"config.pbtxt": PIPELINE},
        "diamond": {"config.pbtxt": DIAMOND},
        "nested": {"config.pbtxt": NESTED},
        "picky_ens": {"config.pbtxt": PICKY_ENS},
        "limited": {"config.pbtxt": LIMITED},
        "streamed": {"config.pbtxt": STREAMED},
    }
    models.update({name: {"config.pbtxt": text} for name, text in BROKEN.items()})
    return write_repository(root, models)


# -- the graph, without a server -----------------------------------------------------------------


def _plan(text: str) -> Plan:
    config = parse_config_text(text, "ens")
    config.name = "ens"
    return Plan.from_config(config)


def test_plan_orders_steps_and_prunes_by_requested_outputs():
    plan = _plan(DIAMOND)
    order = [s.model for s in plan.steps]
    assert order.index("add_sub") > max(order.index("left"), order.index("right"))
    assert [s.model for s in plan.steps_for(["WHEN_L"])] == ["left"]
    assert {s.model for s in plan.steps_for(["SUM"])} == {"left", "right", "add_sub"}
    assert plan.steps_for(["WHEN_L"]) is plan.steps_for(["WHEN_L"])  # cached


def test_plan_refuses_a_cycle_and_an_unused_input():
    with pytest.raises(ConfigError, match=r"ensemble 'ens': its steps form a cycle: step 0 .* -> step 1 .* -> step 0"):
        _plan(BROKEN["cyc"])
    unused = ensemble({"A": F4, "UNUSED": F4}, {"OUT": F4}, [_step("preprocess", {"X": "A"}, {"Y": "OUT"})])
    with pytest.raises(ConfigError, match="ensemble input 'UNUSED' is not used by any step"):
        _plan(unused)


def test_plan_step_labels_name_the_model_and_version():
    plan = _plan(NESTED)
    assert plan.steps[0].label == "step 0 (model 'pipeline' version 1)"


# -- a server with every model loaded (control mode none) ----------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    return serve(
        repository(tmp_path_factory.mktemp("ensemble") / "models"), "--exit-on-error=false", "--strict-readiness=false"
    )


@pytest.fixture(scope="module")
def http(server):
    c = httpclient.InferenceServerClient(server.http_url, concurrency=4)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def _inputs(module, arrays: dict[str, np.ndarray]) -> list:
    out = []
    for name, array in arrays.items():
        datatype = (
            "BYTES"
            if array.dtype == np.object_
            else {"float32": "FP32", "int64": "INT64", "int32": "INT32"}[str(array.dtype)]
        )
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


A = np.array([[1, 2, 3, 4]], dtype=np.float32)
B = np.array([[10, 20, 30, 40]], dtype=np.float32)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_pipeline_computes_both_steps(module, http, grpc):
    client = http if module is httpclient else grpc
    result = client.infer("pipeline", _inputs(module, {"A": A, "B": B}))
    np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * A + B)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), 2 * A - B)


def test_request_parameters_reach_the_steps(http):
    result = http.infer("pipeline", _inputs(httpclient, {"A": A, "B": B}), parameters={"tag": "x", "n": 3})
    assert json.loads(result.as_numpy("P")[0, 0]) == {"tag": "x", "n": 3}


def test_requested_outputs_subset_and_pruned_steps(http):
    result = http.infer(
        "pipeline", _inputs(httpclient, {"A": A, "B": B}), outputs=[httpclient.InferRequestedOutput("DIFF")]
    )
    np.testing.assert_array_equal(result.as_numpy("DIFF"), 2 * A - B)
    assert result.as_numpy("SUM") is None and result.as_numpy("P") is None
    # Only P asked for: add_sub is not needed, so it does not run.
    before = http.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["success"]["count"]
    result = http.infer(
        "pipeline", _inputs(httpclient, {"A": A, "B": B}), outputs=[httpclient.InferRequestedOutput("P")]
    )
    assert json.loads(result.as_numpy("P")[0, 0]) == {}
    after = http.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["success"]["count"]
    assert after == before


def test_diamond_branches_run_in_parallel(http):
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    result = http.infer("diamond", _inputs(httpclient, {"X": x}))
    np.testing.assert_array_equal(result.as_numpy("SUM"), 2 * x + 3 * x)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), 2 * x - 3 * x)
    (l_start, l_end), (r_start, r_end) = result.as_numpy("WHEN_L")[0], result.as_numpy("WHEN_R")[0]
    assert l_start < r_end and r_start < l_end, "the two branches did not overlap"


def test_ensemble_of_an_ensemble(http, grpc):
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        result = client.infer("nested", _inputs(module, {"A": A, "B": B}))
        np.testing.assert_array_equal(result.as_numpy("S"), 2 * A + B)


def test_step_failure_names_the_step_model(http, grpc):
    bad = np.array([-1, 2], dtype=np.int64)
    with pytest.raises(InferenceServerException) as info:
        http.infer("picky_ens", _inputs(httpclient, {"X": bad}))
    assert "in ensemble 'picky_ens', step 0 (model 'picky'): negative input -1" in info.value.message()
    assert info.value.status() == "500"  # Triton answers the step's error code (INTERNAL)
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("picky_ens", _inputs(grpcclient, {"X": bad}))
    assert "model 'picky'" in info.value.message() and info.value.status() == "StatusCode.INTERNAL"
    good = http.infer("picky_ens", _inputs(httpclient, {"X": np.array([1, 2], dtype=np.int64)}))
    np.testing.assert_array_equal(good.as_numpy("Y"), [4, 8])


def test_invalid_ensembles_are_unavailable_with_their_reason(http):
    index = {e["name"]: e for e in http.get_model_repository_index()}
    expected = {
        "cyc": "its steps form a cycle",
        "unknown_step": "model 'nope') calls a model that is not available: it is not in the model repository",
        "dangling": "ensemble tensor 'ghost' read by step 'add_sub' is neither an ensemble input nor produced",
        "twice": "ensemble tensor 'OUT' is written by more than one step",
        "unproduced": "ensemble output 'NOBODY' is not produced by any step",
        "badtype": "ensemble tensor 'A' has inconsistent datatypes: INT32",
        "wrong_input": "maps ensemble tensor 'A' to input 'NOPE', which model 'preprocess' does not have",
    }
    for name, reason in expected.items():
        assert index[name]["state"] == "UNAVAILABLE", name
        assert reason in index[name]["reason"], (name, index[name]["reason"])
        assert not http.is_model_ready(name)
    for name in ("pipeline", "diamond", "nested", "add_sub"):
        assert index[name]["state"] == "READY"


def test_metadata_config_and_statistics(http):
    meta = http.get_model_metadata("pipeline")
    assert meta["platform"] == "ensemble"
    assert [i["shape"] for i in meta["inputs"]] == [[-1, 4], [-1, 4]]
    assert http.get_model_config("pipeline")["model_transaction_policy"] == {"decoupled": False}
    assert http.get_model_config("streamed")["model_transaction_policy"] == {"decoupled": True}
    before = http.get_inference_statistics("pipeline")["model_stats"][0]
    http.infer("pipeline", _inputs(httpclient, {"A": A, "B": B}))
    with pytest.raises(InferenceServerException):
        http.infer("picky_ens", _inputs(httpclient, {"X": np.array([-5], dtype=np.int64)}))
    after = http.get_inference_statistics("pipeline")["model_stats"][0]
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    assert after["inference_count"] == before["inference_count"] + 1
    fails = http.get_inference_statistics("picky_ens")["model_stats"][0]["inference_stats"]["fail"]["count"]
    assert fails >= 1


def test_max_inflight_requests_limits_concurrent_step_requests(http):
    # 'left' has two instances, but the ensemble lets one request at a time into its step.
    x = np.ones((1, 4), dtype=np.float32)
    results = [http.async_infer("limited", _inputs(httpclient, {"X": x})) for _ in range(2)]
    (s1, e1), (s2, e2) = (r.get_result().as_numpy("WHEN")[0] for r in results)
    assert e1 <= s2 or e2 <= s1, "the two step requests overlapped"


def test_decoupled_ensemble_streams_over_grpc(grpc, http):
    responses: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        text = np.array([b"ab"], dtype=np.object_)
        grpc.async_stream_infer("streamed", _inputs(grpcclient, {"T": text, "C": np.array([3], dtype=np.int32)}),
                                enable_empty_final_response=True)  # fmt: skip
        got = []
        while True:
            result, error = responses.get(timeout=30)
            assert error is None, error
            final = result.get_response().parameters.get("triton_final_response")
            if result.as_numpy("O") is not None:
                got.append(result.as_numpy("O")[0])
            if final is not None and final.bool_param:
                break
    finally:
        grpc.stop_stream()
    assert sorted(got) == [b"AB-0", b"AB-1", b"AB-2"]
    with pytest.raises(InferenceServerException) as info:  # plain /infer refuses a decoupled model
        http.infer("streamed", _inputs(httpclient, {"T": text, "C": np.array([1], dtype=np.int32)}))
    assert info.value.status() == "501"


# -- explicit mode: composing models load with the ensemble, and unload cascades ------------------


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    srv = ServerProcess([repository(tmp_path_factory.mktemp("explicit") / "models")],
                        ["--model-control-mode=explicit"]).start()  # fmt: skip
    client = httpclient.InferenceServerClient(srv.http_url)
    yield client
    client.close()
    srv.stop()


def _ready(client) -> set[str]:
    return {e["name"] for e in client.get_model_repository_index() if e.get("state") == "READY"}


def test_loading_an_ensemble_loads_its_composing_models(explicit):
    explicit.load_model("nested")
    assert _ready(explicit) == {"nested", "pipeline", "preprocess", "add_sub"}
    result = explicit.infer("nested", _inputs(httpclient, {"A": A, "B": B}))
    np.testing.assert_array_equal(result.as_numpy("S"), 2 * A + B)


def test_unloading_a_composing_model_unloads_its_ensembles(explicit):
    explicit.load_model("nested")
    explicit.unload_model("add_sub")
    assert _ready(explicit) == {"preprocess"}
    index = {e["name"]: e for e in explicit.get_model_repository_index()}
    assert index["pipeline"]["state"] == "UNAVAILABLE" and index["nested"]["state"] == "UNAVAILABLE"


def test_unload_dependents_unloads_the_composing_models(explicit):
    explicit.load_model("pipeline")
    explicit.unload_model("pipeline")  # without the flag, the composing models stay
    assert _ready(explicit) == {"preprocess", "add_sub"}
    explicit.load_model("pipeline")
    explicit.unload_model("pipeline", unload_dependents=True)
    assert _ready(explicit) == set()


def test_explicit_load_of_an_invalid_ensemble_fails_with_the_reason(explicit):
    with pytest.raises(InferenceServerException, match="calls a model that is not available"):
        explicit.load_model("unknown_step")
    with pytest.raises(InferenceServerException, match="its steps form a cycle"):
        explicit.load_model("cyc")


def test_poll_mode_removing_a_composing_model_unloads_its_ensembles(tmp_path):
    """In poll mode, deleting a step model takes its ensembles down with a reason, as an explicit
    unload does; the other models keep serving."""
    repo = _poll_repository(tmp_path / "models")
    with ServerProcess([repo], ["--model-control-mode=poll", "--repository-poll-secs=1"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.is_model_ready("pipeline")
        shutil.rmtree(repo / "double")
        deadline = time.monotonic() + 30
        while client.is_model_ready("pipeline") and time.monotonic() < deadline:
            time.sleep(0.1)
        index = {(m["name"], m.get("version", "")): m for m in client.get_model_repository_index()}
        assert index[("pipeline", "1")]["state"] == "UNAVAILABLE"
        assert "double" in index[("pipeline", "1")]["reason"]
        assert client.is_model_ready("other")


def _poll_repository(root):
    double_cfg = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
    double_py = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)])
                for r in requests]
"""
    pipeline_cfg = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling { step [ { model_name: "double" model_version: -1
  input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } ] }
"""
    return write_repository(root, {
        "double": {"config.pbtxt": double_cfg, "1/model.py": double_py},
        "other": {"config.pbtxt": double_cfg, "1/model.py": double_py},
        "pipeline": {"config.pbtxt": pipeline_cfg},
    })  # fmt: skip
