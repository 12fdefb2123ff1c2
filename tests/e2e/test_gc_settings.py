"""``inferd serve`` tunes the garbage collector from its start, freezes the start-up heap once started
and gives it back when a model version unloads (``inferd.engine.gc_settings``): seen from inside a
real server, by Python-backend models that report the collector's state of the process they run in."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.engine import gc_settings
from inferd.testing import ServerProcess
from tests.e2e.models import add_sub, simple
from tests.python_models import source
from tests.servers import Servers

GC_STATE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "STATE" data_type: TYPE_INT64 dims: [ 2 ] } ]
"""
GC_STATE_PY = """
import gc
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        state = np.array([gc.get_threshold()[0], gc.get_freeze_count()], np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("STATE", state)]) for _ in requests]
"""


#: A model that reports the young generation's threshold while it loads (during the server's start-up)
#: and in a process that multiprocessing spawns from the server, as vLLM starts its engine.
START_UP_PY = source("gc_settings_start_up")


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    gc_models = {
        "gc_state": simple(GC_STATE_CONFIG, GC_STATE_PY),
        "add_sub": add_sub(),
        "start_up": simple(GC_STATE_CONFIG, START_UP_PY),
    }
    return serve(gc_models, "--model-control-mode=explicit", "--load-model=*")


def _state(client: httpclient.InferenceServerClient, model: str = "gc_state") -> tuple[int, int]:
    x = httpclient.InferInput("X", [1], "INT64")
    x.set_data_from_numpy(np.zeros(1, np.int64))
    first, second = client.infer(model, [x]).as_numpy("STATE").tolist()
    return first, second


def test_the_server_collects_less_often_and_thaws_its_heap_when_a_model_unloads(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    threshold, frozen = _state(client)
    assert threshold == gc_settings.YOUNG_THRESHOLD != 700  # Python's default
    assert frozen > 1000  # imports, plugins, the loaded models
    client.unload_model("add_sub")
    assert _state(client) == (gc_settings.YOUNG_THRESHOLD, 0)


def test_the_start_up_and_the_processes_it_spawns_collect_less_often_too(server: ServerProcess) -> None:
    # importing vLLM's engine, in the server and in the engine's spawned process: 13.6 s of CPU with
    # Python's default thresholds, ~10 s with these (gc_settings)
    assert _state(httpclient.InferenceServerClient(server.http_url), "start_up") == (gc_settings.YOUNG_THRESHOLD,) * 2


def test_settle_and_thaw_in_process() -> None:
    before = gc.get_threshold()
    try:
        gc_settings.settle()
        assert gc.get_threshold() == (gc_settings.YOUNG_THRESHOLD, 20, 100)
        assert gc.get_freeze_count() > 0
        gc_settings.thaw()
        assert gc.get_freeze_count() == 0
        gc_settings.thaw()  # nothing frozen: nothing to do
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
