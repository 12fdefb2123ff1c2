"""``inferd serve`` tunes the garbage collector once started and gives the frozen start-up heap
back when a model version unloads (``inferd.contracts.gc_settings``): seen from inside a real server, by a
Python-backend model that reports the collector's state of the process it runs in."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.contracts import gc_settings
from inferd.testing import ServerProcess, write_repository
from tests.e2e.models import add_sub, simple

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("gc")
    repo = write_repository(root / "models", {"gc_state": simple(GC_STATE_CONFIG, GC_STATE_PY), "add_sub": add_sub()})
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=*"]) as srv:
        yield srv


def _state(client: httpclient.InferenceServerClient) -> tuple[int, int]:
    x = httpclient.InferInput("X", [1], "INT64")
    x.set_data_from_numpy(np.zeros(1, np.int64))
    threshold, frozen = client.infer("gc_state", [x]).as_numpy("STATE").tolist()
    return threshold, frozen


def test_the_server_collects_less_often_and_thaws_its_heap_when_a_model_unloads(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    threshold, frozen = _state(client)
    assert threshold == gc_settings.YOUNG_THRESHOLD != gc.get_threshold()[0]  # this process keeps its own
    assert frozen > 1000  # imports, plugins, the loaded models
    client.unload_model("add_sub")
    assert _state(client) == (gc_settings.YOUNG_THRESHOLD, 0)


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
