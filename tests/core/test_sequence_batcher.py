"""The sequence batcher on a real server, driven by tritonclient.

An accumulator Python model keeps each sequence's running sum twice: in implicit state
(``STATE_IN`` -> ``STATE_OUT``, kept by the server) and in its own memory keyed by correlation id.
It reports the control tensors it saw, so the tests check what the batcher synthesized.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.config import parse_config_text
from inferd.contracts.backend import InstanceSpec
from inferd.contracts.errors import InferdError
from inferd.contracts.scheduler import SchedulerContext
from inferd.contracts.types import InferRequest, InferTensor
from inferd.engine.array_instance import ArrayInstance
from inferd.engine.recorder import Recorder
from inferd.engine.runner import Runner
from inferd.engine.stats import ModelStats
from inferd.engine.version import ModelVersion
from inferd.schedulers.sequence.batcher import SequenceBatchScheduler
from inferd.schedulers.sequence.controls import ImplicitState, SequenceControls
from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

MODEL_PY = source("sequence_batcher")

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: %s } ] }
  ]
"""

STATE = """
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] %s } ]
"""


def _config(name: str, max_batch_size: int, sequencing: str, extra_outputs: str = "") -> str:
    return textwrap.dedent(f"""
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        output [
          {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
          {{ name: "MEM" data_type: TYPE_INT32 dims: [ 1 ] }},
          {{ name: "INFO" data_type: TYPE_STRING dims: [ 1 ] }}
          {extra_outputs}
        ]
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
        sequence_batching {{
          {sequencing}
        }}
    """)


MODELS = {
    "acc": _config(
        "acc",
        4,
        "max_sequence_idle_microseconds: 10000000\n direct { }\n"
        + CONTROLS % "TYPE_UINT64"
        + STATE % 'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }',
    ),
    "acc_oldest": _config(
        "acc_oldest",
        2,
        "max_sequence_idle_microseconds: 10000000\n oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 50000 }\n"
        + CONTROLS % "TYPE_STRING"
        + STATE % "",
    ),
    "idle1": _config(
        "idle1",
        1,
        "max_sequence_idle_microseconds: 1000000\n"
        'control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]',
    ),
    "nobatch_seq": _config(
        "nobatch_seq",
        0,
        CONTROLS % "TYPE_INT64" + STATE % "",
        extra_outputs=', { name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }',
    ),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    root = tmp_path_factory.mktemp("sequence")
    repo = write_repository(
        root / "models", {n: {"config.pbtxt": c, "1/model.py": MODEL_PY} for n, c in MODELS.items()}
    )
    return serve(repo)


def _infer(client: httpclient.InferenceServerClient, model: str, value: int, batched: bool = True, **kw: Any):
    data = np.array([[value]] if batched else [value], dtype=np.int32)
    inp = httpclient.InferInput("IN", list(data.shape), "INT32")
    inp.set_data_from_numpy(data)
    return client.infer(model, [inp], **kw)


def _info(result: httpclient.InferResult) -> dict[str, Any]:
    return json.loads(result.as_numpy("INFO").reshape(-1)[0])


def _run_sequence(url: str, model: str, cid: Any, values: list[int], only_out: bool = False) -> list[Any]:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    outputs = [httpclient.InferRequestedOutput(n) for n in ("OUT", "MEM", "INFO")] if only_out else None
    results = []
    try:
        for i, v in enumerate(values):
            results.append(_infer(client, model, v, sequence_id=cid, sequence_start=i == 0,
                                  sequence_end=i == len(values) - 1, outputs=outputs))  # fmt: skip
    finally:
        client.close()
    return results


def _run_concurrently(url: str, model: str, plans: dict[Any, list[int]], only_out: Any = ()) -> dict[Any, Any]:
    found: dict[Any, Any] = {}

    def run(cid: Any, values: list[int]) -> None:
        try:
            found[cid] = _run_sequence(url, model, cid, values, only_out=cid in only_out)
        except Exception as exc:
            found[cid] = exc

    threads = [threading.Thread(target=run, args=item) for item in plans.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return found


def test_interleaved_sequences_keep_separate_state(server):
    plans = {1001: [1, 2, 3, 4, 5, 6], 1002: [10, 20, 30, 40, 50, 60], 1003: [100, 100, 100, 100, 100, 100]}
    found = _run_concurrently(server.http_url, "acc", plans, only_out={1002})
    for cid, values in plans.items():
        results = found[cid]
        assert not isinstance(results, Exception), results
        sums = list(np.cumsum(values))
        assert [int(r.as_numpy("OUT")[0, 0]) for r in results] == sums  # implicit state
        assert [int(r.as_numpy("MEM")[0, 0]) for r in results] == sums  # model memory by correlation id
        for i, r in enumerate(results):
            assert r.as_numpy("STATE_OUT") is None  # the state output is not a config output
            info = _info(r)
            first, last = i == 0, i == len(values) - 1
            assert info["corr"] == cid
            assert info["unique"]
            assert info["START"] == ["int32", [1, 1], [int(first)]]
            assert info["END"] == ["float32", [1, 1], [float(last)]]
            assert info["READY"] == ["bool", [1, 1], [True]]
            assert info["CORRID"] == ["uint64", [1, 1], [cid]]
            assert info["flags"] == (1 if first else 0) | (2 if last else 0)
            assert info["inputs"] == ["CORRID", "END", "IN", "READY", "START", "STATE_IN"]


def test_oldest_strategy_with_string_ids(server):
    plans = {"seq-a": [1, 1, 1, 1], "seq-b": [2, 2, 2, 2], "seq-c": [3, 3, 3, 3]}
    found = _run_concurrently(server.http_url, "acc_oldest", plans)
    for cid, values in plans.items():
        results = found[cid]
        assert not isinstance(results, Exception), results
        assert [int(r.as_numpy("OUT")[0, 0]) for r in results] == list(np.cumsum(values))
        assert [int(r.as_numpy("MEM")[0, 0]) for r in results] == list(np.cumsum(values))
        for r in results:
            info = _info(r)
            assert info["corr"] == cid
            assert info["CORRID"] == ["object", [1, 1], [cid]]
            assert info["unique"] and info["n"] <= 2


def test_sequence_errors_match_triton(server):
    client = httpclient.InferenceServerClient(server.http_url)
    cases = [
        ({}, "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 4242}, "inference request for sequence 4242 to model 'acc' must specify the START flag "
                                "on the first request of the sequence"),
        ({"sequence_id": "nope", "sequence_end": True}, "inference request for sequence nope to model 'acc' must "
                                                        "specify the START flag on the first request of the sequence"),
    ]  # fmt: skip
    for kw, message in cases:
        with pytest.raises(InferenceServerException) as info:
            _infer(client, "acc", 1, **kw)
        assert info.value.status() == "400"
        assert message in info.value.message()
    data = np.array([[1], [2]], dtype=np.int32)
    inp = httpclient.InferInput("IN", [2, 1], "INT32")
    inp.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException) as info:
        client.infer("acc", [inp], sequence_id=5, sequence_start=True)
    assert "must specify batch-size 1 due to requirements of sequence batcher" in info.value.message()
    # An ended sequence is unknown again.
    _infer(client, "acc", 1, sequence_id=77, sequence_start=True, sequence_end=True)
    with pytest.raises(InferenceServerException) as info:
        _infer(client, "acc", 1, sequence_id=77)
    assert "must specify the START flag" in info.value.message()


def test_start_on_a_live_sequence_restarts_its_state(server):
    client = httpclient.InferenceServerClient(server.http_url)
    _infer(client, "acc", 5, sequence_id=88, sequence_start=True)
    assert int(_infer(client, "acc", 6, sequence_id=88).as_numpy("OUT")[0, 0]) == 11
    assert int(_infer(client, "acc", 1, sequence_id=88, sequence_start=True).as_numpy("OUT")[0, 0]) == 1
    assert int(_infer(client, "acc", 2, sequence_id=88, sequence_end=True).as_numpy("OUT")[0, 0]) == 3


def test_idle_sequence_frees_its_slot(server):
    # One slot (max_batch_size 1, one instance). A holds it without ending; B waits in the backlog
    # until A has been idle for max_sequence_idle_microseconds (1 s), then runs. A is then unknown.
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    _infer(client, "idle1", 1, sequence_id=1, sequence_start=True)
    t0 = time.monotonic()
    result = _infer(client, "idle1", 5, sequence_id=2, sequence_start=True)
    assert int(result.as_numpy("MEM")[0, 0]) == 5
    assert time.monotonic() - t0 > 0.5  # it had to wait for the slot
    with pytest.raises(InferenceServerException) as info:
        _infer(client, "idle1", 1, sequence_id=1)
    assert "must specify the START flag" in info.value.message()
    assert int(_infer(client, "idle1", 1, sequence_id=2, sequence_end=True).as_numpy("MEM")[0, 0]) == 6


def test_no_batch_dimension_and_a_requested_state_output(server):
    client = httpclient.InferenceServerClient(server.http_url)
    outputs = [httpclient.InferRequestedOutput("OUT"), httpclient.InferRequestedOutput("STATE_OUT"),
               httpclient.InferRequestedOutput("INFO")]  # fmt: skip
    sums = []
    for i, v in enumerate([3, 4, 5]):
        r = _infer(client, "nobatch_seq", v, batched=False, sequence_id=9, sequence_start=i == 0,
                   sequence_end=i == 2, outputs=outputs)  # fmt: skip
        sums.append(int(r.as_numpy("STATE_OUT")[0]))
        assert r.as_numpy("MEM") is None  # not asked for
        info = _info(r)
        assert info["START"] == ["int32", [1], [int(i == 0)]]
        assert info["CORRID"] == ["int64", [1], [9]]
    assert sums == [3, 7, 12]
    # Asking for every output returns the state output too, since the config lists it.
    r = _infer(client, "nobatch_seq", 2, batched=False, sequence_id=10, sequence_start=True, sequence_end=True)
    assert int(r.as_numpy("STATE_OUT")[0]) == 2


def test_statistics_count_sequence_executions(server):
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("acc")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= 18
    assert stats["execution_count"] <= stats["inference_count"]


# -- in-process: a framework-style (ArrayInstance) model, control and state helpers -------------------


class Accumulate(ArrayInstance):
    """OUT = STATE_OUT = IN + STATE_IN, computed on whole batches as a framework backend would."""

    def __init__(self) -> None:
        super().__init__("fw", 1, 4)
        self.batches: list[int] = []

    def run(self, inputs):
        self.batches.append(inputs["IN"].shape[0])
        assert inputs["READY"].shape == inputs["IN"].shape  # one control row per request
        time.sleep(0.01)
        total = inputs["IN"] + inputs["STATE_IN"]
        return {"OUT": total, "STATE_OUT": total}


FW_CONFIG = """
name: "fw"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  control_input [ { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
"""


def test_framework_model_batches_sequences_and_keeps_their_state():
    config = parse_config_text(FW_CONFIG, "fw/config.pbtxt")
    instance = Accumulate()
    recorder = Recorder(ModelStats("fw", "1"), config.max_batch_size)
    runners = [Runner(instance, InstanceSpec("fw_0", "KIND_CPU", 0, 0, "fw"), recorder)]
    scheduler = SequenceBatchScheduler(SchedulerContext("fw", 1, config, runners, recorder))
    version = ModelVersion("fw", 1, config, None, runners, scheduler, recorder.stats)

    async def sequence(cid: int, values: list[int]) -> list[int]:
        sums = []
        for i, v in enumerate(values):
            request = InferRequest(
                "fw",
                inputs={"IN": InferTensor.from_array("IN", np.array([[v]], dtype=np.int32))},
                parameters={"sequence_id": cid, "sequence_start": i == 0, "sequence_end": i == len(values) - 1},
            )
            response = await version.infer(request)
            assert [o.name for o in response.outputs] == ["OUT"]  # the state output stays inside
            sums.append(int(response.output("OUT").data[0, 0]))
        return sums

    async def main() -> list[list[int]]:
        plans = [[k + 1] * 8 for k in range(4)]
        found = await asyncio.gather(*(sequence(100 + k, p) for k, p in enumerate(plans)))
        await version.scheduler.stop()
        return found

    try:
        found = asyncio.run(main())
    finally:
        version.close()
    assert found == [[(k + 1) * (i + 1) for i in range(8)] for k in range(4)]
    assert max(instance.batches) > 1 and sum(instance.batches) == 32


def test_control_tensors_for_each_corrid_type():
    def corrid(data_type: str, cid: Any) -> Any:
        config = parse_config_text(
            'name: "m"\nmax_batch_size: 2\nsequence_batching { control_input [ { name: "C" control [ '
            f"{{ kind: CONTROL_SEQUENCE_CORRID data_type: {data_type} }} ] }} ] }}",
            "m",
        )
        return SequenceControls(config).corrid(cid)

    t = corrid("TYPE_UINT64", 2**64 - 1)
    assert (t.datatype, t.shape, t.data.tolist()) == ("UINT64", (1, 1), [[2**64 - 1]])
    assert corrid("TYPE_INT32", 7).data.tolist() == [[7]]
    assert corrid("TYPE_INT64", 2**64 - 1).data.tolist() == [[-1]]  # the same bytes, as Triton copies them
    assert corrid("TYPE_STRING", 12).data.tolist() == [[b"12"]]
    assert corrid("TYPE_STRING", "abc").data.tolist() == [[b"abc"]]
    # A string id with a numeric CORRID gets a stable hash.
    assert corrid("TYPE_UINT64", "abc").data.tolist() == corrid("TYPE_UINT64", "abc").data.tolist()


def test_initial_state_from_a_data_file(tmp_path: Path):
    (tmp_path / "initial_state").mkdir()
    np.array([5, 6], dtype=np.int32).tofile(tmp_path / "initial_state" / "init.bin")
    text = (
        'name: "m"\nmax_batch_size: 2\nsequence_batching { state [ { input_name: "S" output_name: "S_OUT" '
        'data_type: TYPE_INT32 dims: [ -1 ] initial_state { data_type: TYPE_INT32 dims: [ 2 ] %s name: "i" } } ] }'
    )
    state = ImplicitState(parse_config_text(text % 'data_file: "init.bin"', "m"), tmp_path)
    assert state.initial()["S"].tolist() == [[5, 6]]
    assert ImplicitState(parse_config_text(text % "zero_data: true", "m"), None).initial()["S"].tolist() == [[0, 0]]
    with pytest.raises(InferdError, match="initial_state expects 12 bytes"):
        ImplicitState(
            parse_config_text(text.replace("dims: [ 2 ]", "dims: [ 3 ]") % 'data_file: "init.bin"', "m"), tmp_path
        )
    with pytest.raises(InferdError, match="does not match the state data type"):
        ImplicitState(
            parse_config_text(text.replace("TYPE_INT32 dims: [ 2 ]", "TYPE_FP32 dims: [ 2 ]") % "zero_data: true", "m"),
            None,
        )
