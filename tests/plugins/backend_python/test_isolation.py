"""The threads and statistics a backend's isolated models share (``inferd_backend_python.isolation``):
made by the backend, started with its first isolated model, ended with the last one, counts kept.

Real stub processes on an event loop of their own thread (as the server's), no server around them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.api import SOURCES, InferResponse, InstanceSpec, Model
from inferd_backend_python.backend import PythonBackend

from .conftest import context_for, make_request, write_model

CONFIG = """
input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]
parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }
"""
MODEL_PY = """
import os
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if value[0] < 0:
                os._exit(3)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value + 1)]))
        return responses
"""
THREADS = ("inferd-python-spawner", "inferd-python-watchdog")


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running on a thread of its own, as the server's."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _running(prefix: str) -> bool:
    return any(t.name.startswith(prefix) and t.is_alive() for t in threading.enumerate())


def _load(backend: PythonBackend, model_dir: Path, loop: asyncio.AbstractEventLoop) -> tuple[Model, Any]:
    model = backend.load_model(dataclasses.replace(context_for(model_dir), loop=loop))
    return model, model.create_instance(InstanceSpec("m_0", "KIND_CPU", 0, 0, "m"))


def _infer(instance: Any, loop: asyncio.AbstractEventLoop, value: int) -> Any:
    request = make_request("m", {"IN": np.array([value], dtype=np.int32)})
    return asyncio.run_coroutine_threadsafe(instance.execute([request]), loop).result(30)


def _wait(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def _samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in SOURCES.collect()
        for s in family.samples
        if s.name == name
    }


def test_the_threads_end_with_the_last_isolated_model_and_the_counts_stay(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    backend = PythonBackend()
    model_dir = write_model(tmp_path, "m", MODEL_PY, CONFIG)
    assert not _samples("inferd_python_stub_crashes_total")

    model, instance = _load(backend, model_dir, loop)
    [response] = _infer(instance, loop, 1)
    assert isinstance(response, InferResponse) and response.outputs[0].data.tolist() == [2]
    assert all(_running(name) for name in THREADS)
    _infer(instance, loop, -1)  # its stub exits: a crash, counted
    crashes = _samples("inferd_python_stub_crashes_total")
    assert crashes == {(("cause", "exit"), ("instance", "m_0"), ("model", "m"), ("version", "1")): 1}
    _wait(lambda: instance.stub is not None)  # restarted

    instance.close()
    model.unload()
    _wait(lambda: not any(_running(name) for name in THREADS))
    assert not any(_running(name) for name in THREADS)
    assert "inferd_python_stub_crashes_total" not in {f.name for f in SOURCES.collect()}

    model, instance = _load(backend, model_dir, loop)  # the threads start again; the count is the backend's
    try:
        assert _infer(instance, loop, 5)[0].outputs[0].data.tolist() == [6]
        assert all(_running(name) for name in THREADS)
        assert _samples("inferd_python_stub_crashes_total") == crashes
    finally:
        instance.close()
        model.unload()
