"""In-process Python models whose executions are quick run on the server's event loop (no thread
hop), against a real ``inferd serve`` over HTTP: which thread ran each execution is the model's own
answer (``threading.current_thread().name``). A model that waits (sleep), one that reaches a BLS
call the source check could not see, and one whose plain ``execute`` returns a coroutine leave the
loop for good, without a failed request; ``EXECUTE_INLINE off`` and models whose source shows that
they may wait or call other models never run there (``on`` runs them there all the same); a bad
``EXECUTE_INLINE`` value fails the load naming the parameter.
"""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "CALLS" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
#: Answers OUT = IN * 10, the thread that ran the execution, and how many executions ran so far;
#: ``asyncio.run`` works in it (the server's loop is not visible), and it fails if a loop is.
WHERE_PY = """
import asyncio
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


async def _nothing():
    return None


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        self.calls += 1
        asyncio.run(_nothing())
        where = threading.current_thread().name
        WAIT
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", OUTPUT),
            pb_utils.Tensor("WHERE", np.array([where.encode()], dtype=object)),
            pb_utils.Tensor("CALLS", np.array([self.calls], np.int32)),
        ]) for r in requests]
"""
TIMES10 = "pb_utils.get_input_tensor_by_name(r, 'IN').as_numpy() * 10"
#: A BLS call spelled so that the source check cannot see it.
HIDDEN_BLS = """getattr(getattr(pb_utils, "Inference" + "Request")(
                model_name="times10", inputs=[pb_utils.get_input_tensor_by_name(r, "IN")],
                requested_output_names=["OUT"]), "ex" + "ec")().output_tensors()[0].as_numpy()"""
VISIBLE_BLS = """pb_utils.InferenceRequest(
                model_name="times10", inputs=[pb_utils.get_input_tensor_by_name(r, "IN")],
                requested_output_names=["OUT"]).exec().output_tensors()[0].as_numpy()"""
#: A plain execute that returns a coroutine (run on the instance's own event loop).
CORO_PY = WHERE_PY.replace(
    "    def execute(self, requests):",
    "    def execute(self, requests):\n        return self._go(requests)\n\n    async def _go(self, requests):",
).replace("asyncio.run(_nothing())", "await _nothing()")


def model(wait: str = "", output: str = TIMES10, code: str = WHERE_PY, extra: str = "") -> dict[str, str]:
    return {
        "config.pbtxt": CONFIG + extra,
        "1/model.py": code.replace("WAIT", wait or "pass").replace("OUTPUT", output),
    }


def inline(value: str) -> str:
    return f'parameters {{ key: "EXECUTE_INLINE" value: {{ string_value: "{value}" }} }}'


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve(
        {
            "quick": model(),
            "sleeper": model(wait='getattr(time, "sl" + "eep")(0.02)'),  # a wait the source check cannot see
            "visible_sleep": model(wait="time.sleep(0)"),
            # waits now and then, never twice in a row (as the GIL makes a model that never waits look)
            "now_and_then": model(wait='getattr(time, "sl" + "eep")(0.02) if self.calls in (4, 6, 9) else None'),
            "forced": model(wait="threading.Lock()", extra=inline("on")),  # a lock, never waited for
            "times10": model(),
            "hidden_bls": model(output=HIDDEN_BLS),
            "visible_bls": model(output=VISIBLE_BLS),
            "coro": model(code=CORO_PY),
            "off": model(extra=inline("off")),
            "bogus": model(extra=inline("sometimes")),
            "sized": {
                "config.pbtxt": CONFIG.replace("dims: [ 1 ] }, {", "dims: [ -1 ] }, {", 1).replace(
                    'name: "IN" data_type: TYPE_INT32 dims: [ 1 ]', 'name: "IN" data_type: TYPE_INT32 dims: [ -1 ]'
                ),
                "1/model.py": WHERE_PY.replace("WAIT", "pass").replace("OUTPUT", TIMES10),
            },
        },
        "--exit-on-error=false",
        wait_ready=False,  # "bogus" keeps it not ready
    )


def run(server: ServerProcess, name: str, count: int = 12) -> list[tuple[int, str, int]]:
    """``count`` requests one after another: each one's (OUT, thread that ran it, executions so far)."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    answers = []
    for i in range(count):
        tensor = httpclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([i], np.int32))
        result = client.infer(name, [tensor])
        answers.append((int(result.as_numpy("OUT")[0]), result.as_numpy("WHERE")[0].decode(),
                        int(result.as_numpy("CALLS")[0])))  # fmt: skip
    assert [out for out, _, _ in answers] == [i * 10 for i in range(count)]
    return answers


def on_instance_thread(where: str, name: str) -> bool:
    return where == f"inferd-{name}_0"


@pytest.mark.parametrize("name", ["quick", "forced"])
def test_a_quick_model_runs_on_the_event_loop(server, name):
    answers = run(server, name)
    assert on_instance_thread(answers[0][1], name)  # the first, with nothing to predict from
    later = {where for _, where, _ in answers[2:]}
    assert later == {"MainThread"}, answers
    assert answers[-1][2] == len(answers)


def test_a_model_that_waits_leaves_the_loop_after_three_executions_in_a_row(server):
    """Three: one wait alone may be the GIL's (another thread of the server held it), not the model's."""
    answers = run(server, "sleeper")
    places = [where for _, where, _ in answers]
    assert places.count("MainThread") == 3, places
    first = places.index("MainThread")
    assert places[first : first + 3] == ["MainThread"] * 3, places
    assert all(on_instance_thread(w, "sleeper") for w in places[first + 3 :]), places
    assert "model 'sleeper' instance 'sleeper_0': execute on the event loop waited" in server.log()


def test_a_model_that_waits_now_and_then_but_never_three_times_in_a_row_stays_on_the_loop(server):
    places = [where for _, where, _ in run(server, "now_and_then")]
    assert places[2:] == ["MainThread"] * 10, places
    assert "model 'now_and_then' instance 'now_and_then_0': execute on the event loop" not in server.log()


def test_a_batch_of_large_inputs_runs_on_a_thread_and_small_ones_on_the_loop(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    places = []
    for size in (1, 1, 1, 80_000, 1, 80_000):  # 320 KB of INT32: over the 256 KiB a batch may bring to the loop
        tensor = httpclient.InferInput("IN", [size], "INT32")
        values = np.arange(size, dtype=np.int32)
        tensor.set_data_from_numpy(values)
        result = client.infer("sized", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUT"), values * 10)
        places.append(result.as_numpy("WHERE")[0].decode())
    assert places[1:3] == ["MainThread", "MainThread"] and places[4] == "MainThread", places
    assert places[3] == places[5] == "inferd-sized_0", places


def test_a_hidden_bls_call_runs_its_batch_again_on_a_thread(server):
    answers = run(server, "hidden_bls")
    assert all(where != "MainThread" for _, where, _ in answers), answers
    assert answers[-1][2] == len(answers) + 1  # the one batch that reached the call on the loop ran twice
    assert "model 'hidden_bls' instance 'hidden_bls_0': execute on the event loop reached a BLS call" in server.log()


def test_a_coroutine_returned_by_execute_leaves_the_loop(server):
    answers = run(server, "coro")
    assert all(where != "MainThread" for _, where, _ in answers), answers
    assert "execute on the event loop reached a coroutine returned by execute" in server.log()


@pytest.mark.parametrize("name", ["visible_bls", "visible_sleep", "off"])
def test_models_that_may_wait_or_call_models_or_turn_it_off_stay_on_their_thread(server, name):
    answers = run(server, name)
    assert all(on_instance_thread(where, name) for _, where, _ in answers), answers
    assert f"model '{name}' instance '{name}_0': execute on the event loop" not in server.log()


def test_a_bad_execute_inline_value_fails_the_load(server):
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        rows = {row["name"]: row for row in json.loads(response.read())}
    assert rows["bogus"]["state"] == "UNAVAILABLE"
    assert (
        "model 'bogus': parameter EXECUTE_INLINE is 'sometimes'; expected 'auto', 'on' or 'off'"
        in rows["bogus"]["reason"]
    )
