"""A backend whose execute raises: the plugin author gets one ERROR line with the traceback.

A real in-process server, a backend plugin defined here, the official tritonclient. The four
requests of the test form one batch (preferred_batch_size 4), so "once per failure" means one
log record for the four requests; the clients still get the 500 they always got.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.contracts.backend import Backend, InstanceSpec, Model, ModelLoadContext, SyncInstance
from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.hookspecs import BackendRegister, hookimpl
from inferd.contracts.types import InferRequest, InferResponse
from inferd.testing import InProcessServer, write_repository

BATCHES: list[int] = []

CONFIG = """
name: "%s"
backend: "failing"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { name: "worker" count: 1 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 20000000 }
"""


class FailingInstance(SyncInstance):
    def __init__(self, model: str) -> None:
        self.model = model

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        BATCHES.append(len(requests))
        if self.model == "picky":
            raise InvalidArgument("INPUT0 must be positive")
        return self.divide(requests)

    def divide(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        raise ZeroDivisionError("the plugin's own bug")


class FailingModel(Model):
    def __init__(self, name: str) -> None:
        self.name = name

    def create_instance(self, spec: InstanceSpec) -> SyncInstance:
        if self.name == "untyped":
            return Untyped()  # type: ignore[return-value]
        return FailingInstance(self.name)


class Untyped:
    """An instance written against the old contract: an ``execute``, but neither instance type."""

    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        return [InferResponse("untyped", "1", r.id) for r in requests]


class FailingBackend(Backend):
    name = "failing"

    def load_model(self, context: ModelLoadContext) -> Model:
        return FailingModel(context.name)


class Plugin:
    @hookimpl
    def inferd_register_backends(self, register: BackendRegister) -> None:
        register("failing", FailingBackend)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    root = tmp_path_factory.mktemp("models")
    models = {name: {"config.pbtxt": CONFIG % name, "1/.keep": ""} for name in ("broken", "picky")}
    started = InProcessServer([write_repository(root, models)], plugins=[Plugin()]).start()
    yield started
    started.stop()


def _four_requests(url: str, model: str) -> list[InferenceServerException]:
    """Four concurrent requests, which the dynamic batcher runs as one batch; their errors."""
    client = httpclient.InferenceServerClient(url, concurrency=4)
    try:
        pending = []
        for i in range(4):
            x = httpclient.InferInput("INPUT0", [1, 1], "FP32")
            x.set_data_from_numpy(np.full((1, 1), i, dtype=np.float32))
            pending.append(client.async_infer(model, [x]))
        errors = []
        for request in pending:
            with pytest.raises(InferenceServerException) as caught:
                request.get_result()
            errors.append(caught.value)
        return errors
    finally:
        client.close()


def _errors_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("inferd")]


def test_an_exception_in_execute_is_logged_once_per_batch_with_its_traceback(
    server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    BATCHES.clear()
    with caplog.at_level(logging.INFO):
        errors = _four_requests(server.http_url, "broken")
    assert BATCHES == [4]
    for error in errors:  # the clients' answer is unchanged
        assert error.status() == "500"
        assert error.message() == "instance 'worker_0' failed: ZeroDivisionError: the plugin's own bug"
    (record,) = _errors_logged(caplog)
    assert record.getMessage() == "model 'broken' version 1 instance 'worker_0': execute failed"
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    text = caplog.text
    assert text.count("Traceback (most recent call last)") == 1
    assert text.count("ZeroDivisionError: the plugin's own bug") == 1
    assert "in divide" in text  # the frame in the plugin's code


def test_an_inferd_error_raised_on_purpose_is_the_clients_error_only(
    server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    BATCHES.clear()
    with caplog.at_level(logging.INFO):
        errors = _four_requests(server.http_url, "picky")
    assert BATCHES == [4]
    assert [(e.status(), e.message()) for e in errors] == [("400", "INPUT0 must be positive")] * 4
    assert _errors_logged(caplog) == []
    assert "Traceback" not in caplog.text


def test_an_instance_of_neither_type_fails_its_load_by_name(tmp_path: Path) -> None:
    models = {name: {"config.pbtxt": CONFIG % name, "1/.keep": ""} for name in ("untyped", "broken")}
    started = InProcessServer([write_repository(tmp_path, models)], plugins=[Plugin()], exit_on_error=False).start()
    client = httpclient.InferenceServerClient(started.http_url)
    try:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        assert index["untyped"]["state"] == "UNAVAILABLE"
        assert (
            "instance 'worker_0' is a Untyped, which is neither a SyncInstance nor an AsyncInstance"
            in (index["untyped"]["reason"])
        )
        assert index["broken"]["state"] == "READY"  # the others load
    finally:
        client.close()
        started.stop()
