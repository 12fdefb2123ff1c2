"""triton_python_backend_utils on its own, BLS through a fake data plane, and the plugin hook."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils

from inferd.contracts.errors import ErrorKind, NotFound
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from tests.python_models import source

from .conftest import make_request


def test_dtype_helpers():
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.dtype(np.int64)) == 9
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(1) is np.bool_
    assert pb_utils.triton_to_numpy_type(11) is np.float32


def test_bytes_serialisation_round_trip():
    array = np.array([b"a", b"", "caf\u00e9"], dtype=np.object_)
    flat = pb_utils.serialize_byte_tensor(array)
    assert flat == b"\x01\x00\x00\x00a\x00\x00\x00\x00\x05\x00\x00\x00caf\xc3\xa9"
    assert pb_utils.deserialize_bytes_tensor(flat).tolist() == [b"a", b"", "café".encode()]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.zeros(2)) is None


def test_tensor():
    t = pb_utils.Tensor("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    assert t.name() == "X"
    assert t.shape() == [2, 3]
    assert t.triton_dtype() == 11
    assert t.is_cpu()
    strided = pb_utils.Tensor("Y", np.arange(6).reshape(2, 3).T)
    assert strided.as_numpy().flags.c_contiguous
    text = pb_utils.Tensor("S", np.array(["x", "yz"]))
    assert text.as_numpy().dtype == np.object_ and text.as_numpy().tolist() == [b"x", b"yz"]
    assert text.triton_dtype() == 13
    with pytest.raises(pb_utils.TritonModelException, match="empty"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="complex64"):
        pb_utils.Tensor("C", np.zeros(1, dtype=np.complex64))


def test_tensor_dlpack():
    source = np.arange(4, dtype=np.int32)
    t = pb_utils.Tensor("X", source)
    back = pb_utils.Tensor.from_dlpack("Y", t.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), source)
    assert np.shares_memory(back.as_numpy(), source)
    via_protocol = pb_utils.Tensor.from_dlpack("Z", t)
    assert np.shares_memory(via_protocol.as_numpy(), source)
    readonly = np.frombuffer(b"\x00" * 8, dtype=np.float32)
    np.testing.assert_array_equal(np.from_dlpack(pb_utils.Tensor("R", readonly)), [0, 0])
    assert pb_utils.Tensor.from_dlpack("R", pb_utils.Tensor("R", readonly).to_dlpack()).shape() == [2]


def test_triton_error():
    err = pb_utils.TritonError("nope")
    assert err.message() == "nope" and err.code() == pb_utils.TritonError.INTERNAL
    codes = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
             "ALREADY_EXISTS", "CANCELLED")  # fmt: skip
    assert [getattr(pb_utils.TritonError, c) for c in codes] == list(range(8))
    response = pb_utils.InferenceResponse(error=pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND))
    assert response.has_error() and response.error().code() == 2


def test_response_parameters():
    response = pb_utils.InferenceResponse([], parameters={"a": 1, "b": "x", "c": True})
    assert json.loads(response.parameters()) == {"a": 1, "b": "x", "c": True}
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        pb_utils.InferenceResponse([], parameters={"a": 1.5})


def test_request_view():
    from inferd_backend_python.pb_request import ModelBinding

    raw = make_request(
        "m", {"A": np.ones(2)}, outputs=("O",), id="7",
        parameters={"sequence_id": 42, "sequence_start": True, "custom": "v"},
    )  # fmt: skip
    view = pb_utils.InferenceRequest._wrap(raw, ModelBinding("m", "1", None, False))
    assert view.request_id() == "7"
    assert view.correlation_id() == 42
    assert view.flags() == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert json.loads(view.parameters()) == {"custom": "v"}
    assert view.requested_output_names() == {"O"}
    assert not view.is_cancelled()
    assert pb_utils.get_input_tensor_by_name(view, "A").as_numpy() is raw.inputs["A"].data
    assert pb_utils.get_input_tensor_by_name(view, "B") is None


def test_config_helpers():
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": [{"name": "B"}]}
    assert pb_utils.get_input_config_by_name(config, "A")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_input_config_by_name(config, "Z") is None
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B"}
    assert not pb_utils.using_decoupled_model_transaction_policy(config)
    assert pb_utils.using_decoupled_model_transaction_policy({"model_transaction_policy": {"decoupled": True}})


def test_model_config_checks():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 8, "input": [], "output": []}))
    with pytest.raises(ValueError, match="configuration specified max_batch_size 8"):
        config.set_max_batch_size(4)
    config.set_max_batch_size(16)
    assert config.max_batch_size() == 16
    with pytest.raises(ValueError, match="missing 'dims' property"):
        config.add_input({"name": "X", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32 for input 'X'"):
        config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})
    seq = pb_utils.ModelConfig({"name": "s", "sequence_batching": {}})
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        seq.set_dynamic_batching()


def test_logger_goes_to_python_logging(caplog):
    with caplog.at_level(logging.DEBUG, logger="inferd.python"):
        pb_utils.Logger.log_info("hello")
        pb_utils.Logger.log_warn("careful")
        pb_utils.Logger.log_verbose("details")
        pb_utils.Logger.log("bad", pb_utils.Logger.ERROR)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "hello"), (logging.WARNING, "careful"), (logging.DEBUG, "details"),
        (logging.ERROR, "bad"),
    ]  # fmt: skip
    assert caplog.records[0].filename == "test_pb_utils.py"


def test_metric_family_records_in_memory():
    family = pb_utils.MetricFamily("requests", "count", pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(2)
    assert metric.value() == 2
    with pytest.raises(pb_utils.TritonModelException):
        metric.set(1)


class FakeDataPlane:
    """Answers BLS calls to model "double"; anything else is not found."""

    def __init__(self) -> None:
        self.seen: list[InferRequest] = []

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        self.seen.append(request)
        if request.model_name != "double":
            raise NotFound(f"model '{request.model_name}' is not found")
        x = request.inputs["X"].data
        return InferResponse("double", "1", request.id, [InferTensor.from_array("Y", x * 2)])


BLS_MODEL = source("pb_utils_bls_model")


def test_bls_exec(load_model):
    dataplane = FakeDataPlane()
    m = load_model("bls", BLS_MODEL, models=dataplane)
    ok, missing = m.infer(make_request("bls", {"IN": np.array([3])}), make_request("bls", {"IN": np.array([-1])}))
    assert ok.outputs[0].data.tolist() == [6]
    assert missing.kind is ErrorKind.NOT_FOUND and "model 'missing' is not found" in missing.message
    inner = dataplane.seen[0]
    assert (inner.model_name, inner.model_version, inner.id) == ("double", "2", "inner")
    assert inner.requested_output_names() == ["Y"]
    assert inner.parameters == {"sequence_id": 5, "sequence_start": True}


def test_bls_async_exec(load_model):
    code = """
        import asyncio
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                calls = [pb_utils.InferenceRequest(model_name="double", inputs=[pb_utils.Tensor("X", np.array([i]))],
                                                   requested_output_names=["Y"]).async_exec() for i in range(3)]
                answers = await asyncio.gather(*calls)
                total = sum(int(pb_utils.get_output_tensor_by_name(a, "Y").as_numpy()[0]) for a in answers)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([total]))]) for _ in requests]
    """
    m = load_model("asyncbls", code, models=FakeDataPlane())
    [response] = m.infer(make_request("asyncbls", {"IN": np.zeros(1)}))
    assert response.outputs[0].data.tolist() == [6]


def test_bls_without_a_server_reports_an_error():
    request = pb_utils.InferenceRequest(model_name="x", inputs=[], requested_output_names=[])
    from inferd_backend_python import pb_request as pb_api

    token = pb_api._CURRENT.set(None)
    saved = pb_api._last_bound[0]
    pb_api._last_bound[0] = None
    try:
        response = request.exec()
    finally:
        pb_api._CURRENT.reset(token)
        pb_api._last_bound[0] = saved
    assert response.has_error() and response.error().code() == pb_utils.TritonError.UNAVAILABLE


def test_hook_registers_the_backend_lazily():
    from inferd_backend_python import hooks

    registered: dict[str, object] = {}
    hooks.inferd_register_backends(lambda name, factory, **options: registered.__setitem__(name, factory))
    backend = registered["python"]({})
    assert backend.name == "python" and backend.default_model_filename == "model.py"


def test_importing_hooks_stays_light():
    code = (
        "import sys, inferd_backend_python.hooks\n"
        "heavy = [m for m in ('inferd_backend_python.backend', 'triton_python_backend_utils') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
