"""The python backend run directly: load model.py files, create instances, execute requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferd.contracts.backend import InstanceSpec
from inferd.contracts.errors import ErrorKind, InferdError
from inferd.contracts.types import InferResponse
from inferd_backend_python.backend import PythonBackend
from tests.python_models import source

from .conftest import context_for, make_request, write_model

ADD_SUB = source("backend_add_sub")

ADD_SUB_CONFIG = """
    max_batch_size: 8
    input [
      { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
      { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
    ]
    output [
      { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
      { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
    ]
"""


def _inputs(seed: float = 0.0) -> dict[str, np.ndarray]:
    a = np.arange(4, dtype=np.float32).reshape(1, 4) + seed
    return {"INPUT0": a, "INPUT1": np.full((1, 4), 2.0, dtype=np.float32)}


def test_add_sub(load_model):
    m = load_model("add_sub", ADD_SUB, ADD_SUB_CONFIG)
    [response] = m.infer(make_request("add_sub", _inputs(), id="r1"))
    assert isinstance(response, InferResponse)
    assert (response.model_name, response.model_version, response.id) == ("add_sub", "1", "r1")
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(response.output("OUTPUT0").data, [[2, 3, 4, 5]])
    np.testing.assert_array_equal(response.output("OUTPUT1").data, [[-2, -1, 0, 1]])
    assert response.output("OUTPUT0").datatype == "FP32"
    assert response.output("OUTPUT0").shape == (1, 4)


def test_initialize_gets_triton_args(load_model, tmp_path: Path):
    m = load_model("add_sub", ADD_SUB, ADD_SUB_CONFIG)
    args = m.instance._obj.args
    assert set(args) == {
        "model_config", "model_instance_kind", "model_instance_name", "model_instance_device_id",
        "model_repository", "model_version", "model_name",
    }  # fmt: skip
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_name"] == "add_sub_0"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(tmp_path / "add_sub")
    assert args["model_version"] == "1"
    assert args["model_name"] == "add_sub"
    config = json.loads(args["model_config"])
    assert config["name"] == "add_sub"
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [4]


def test_batch_of_requests_answers_each_in_order(load_model):
    m = load_model("add_sub", ADD_SUB, ADD_SUB_CONFIG)
    responses = m.infer(*(make_request("add_sub", _inputs(i), id=str(i)) for i in range(3)))
    assert [r.id for r in responses] == ["0", "1", "2"]
    for i, r in enumerate(responses):
        np.testing.assert_array_equal(r.output("OUTPUT0").data, [[2 + i, 3 + i, 4 + i, 5 + i]])


def test_inputs_are_not_copied(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())])
                        for r in requests]
    """
    m = load_model("identity", code)
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    [response] = m.infer(make_request("identity", {"IN": data}))
    assert response.outputs[0].data is data
    assert response.outputs[0].datatype == "INT64"


def test_requested_outputs_only(load_model):
    m = load_model("add_sub", ADD_SUB, ADD_SUB_CONFIG)
    [response] = m.infer(make_request("add_sub", _inputs(), outputs=("OUTPUT1",)))
    assert [o.name for o in response.outputs] == ["OUTPUT1"]


def test_requested_output_names_seen_by_model(load_model):
    code = """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    names = sorted(r.requested_output_names())
                    out.append(pb_utils.InferenceResponse([pb_utils.Tensor("NAMES", np.array(names or ["-"], dtype=object))]))
                return out
    """
    m = load_model("names", code)
    [r1, r2] = m.infer(
        make_request("names", {"X": np.zeros(1)}, outputs=("NAMES",)),
        make_request("names", {"X": np.zeros(1)}),
    )
    assert r1.outputs[0].data.tolist() == ["NAMES"]
    assert r2.outputs[0].data.tolist() == ["-"]


def test_bytes_strings(load_model):
    code = """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                    upper = np.array([t.decode().upper().encode() for t in text.reshape(-1)], dtype=np.object_)
                    responses.append(pb_utils.InferenceResponse([
                        pb_utils.Tensor("UPPER", upper.reshape(text.shape)),
                        pb_utils.Tensor("LENGTH", np.array([len(t) for t in text.reshape(-1)], dtype=np.int32)),
                    ]))
                return responses
    """
    config = """
        input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
        output [
          { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
          { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }
        ]
    """
    m = load_model("strings", code, config)
    text = np.array([b"hello", b"w\xc3\xb6rld", b""], dtype=np.object_)
    [response] = m.infer(make_request("strings", {"TEXT": text}))
    upper = response.output("UPPER")
    assert upper.datatype == "BYTES"
    assert upper.data.tolist() == [b"HELLO", "WÖRLD".encode(), b""]
    assert response.output("LENGTH").data.tolist() == [5, 6, 0]


def test_execute_raising_fails_only_that_batch(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                if any(r.inputs()[0].as_numpy()[0] < 0 for r in requests):
                    raise ValueError("negative input")
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy() * 2)])
                        for r in requests]
    """
    bad = load_model("raiser", code)
    good = load_model("add_sub", ADD_SUB, ADD_SUB_CONFIG)
    errors = bad.infer(
        make_request("raiser", {"IN": np.array([-1])}),
        make_request("raiser", {"IN": np.array([1])}),
    )
    assert len(errors) == 2
    for error in errors:
        assert isinstance(error, InferdError)
        assert error.kind is ErrorKind.INTERNAL
        assert "model 'raiser'" in error.message
        assert "ValueError: negative input" in error.message
    [ok] = bad.infer(make_request("raiser", {"IN": np.array([3])}))
    assert ok.outputs[0].data.tolist() == [6]
    [other] = good.infer(make_request("add_sub", _inputs()))
    assert isinstance(other, InferResponse)


def test_error_response_for_one_request(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                out = []
                for r in requests:
                    if r.inputs()[0].as_numpy()[0] == 0:
                        out.append(pb_utils.InferenceResponse(
                            error=pb_utils.TritonError("zero is not allowed", pb_utils.TritonError.INVALID_ARG)))
                    else:
                        out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())]))
                return out
    """
    m = load_model("picky", code)
    bad, good = m.infer(make_request("picky", {"IN": np.array([0])}), make_request("picky", {"IN": np.array([1])}))
    assert isinstance(bad, InferdError)
    assert bad.kind is ErrorKind.INVALID_ARG
    assert bad.message == "zero is not allowed"
    assert isinstance(good, InferResponse)


def test_wrong_number_of_responses(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([])]
    """
    m = load_model("short", code)
    errors = m.infer(*(make_request("short", {"IN": np.zeros(1)}) for _ in range(3)))
    assert len(errors) == 3
    assert all(isinstance(e, InferdError) for e in errors)
    assert "model 'short'" in errors[0].message
    assert "InferenceRequest(s) size is:3, and InferenceResponse(s) size is:1" in errors[0].message


def test_execute_returning_a_non_list(load_model):
    code = """
        class TritonPythonModel:
            def execute(self, requests):
                return "nope"
    """
    m = load_model("nonlist", code)
    [error] = m.infer(make_request("nonlist", {"IN": np.zeros(1)}))
    assert "Expected a list in the execute return" in error.message


def test_decoupled_sends_three_responses_then_final(load_model):
    code = """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    sender = request.get_response_sender()
                    value = request.inputs()[0].as_numpy()
                    for i in range(3):
                        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value + i)]))
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    """
    config = "model_transaction_policy { decoupled: true }\n"
    m = load_model("repeat", code, config)
    sent: list[tuple[object, bool]] = []
    request = make_request("repeat", {"IN": np.array([10])}, id="s1")
    request.response_sender = lambda response, final: sent.append((response, final))
    assert m.infer(request) == []
    assert [final for _, final in sent] == [False, False, False, True]
    assert [r.outputs[0].data.tolist() for r, _ in sent[:3]] == [[10], [11], [12]]
    assert all(r.id == "s1" and r.model_name == "repeat" for r, _ in sent[:3])
    assert sent[3][0] is None


def test_decoupled_send_after_final_raises(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    sender = request.get_response_sender()
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    """
    m = load_model("twice", code, "model_transaction_policy { decoupled: true }\n")
    sent: list[tuple[object, bool]] = []
    request = make_request("twice", {"IN": np.zeros(1)})
    request.response_sender = lambda response, final: sent.append((response, final))
    assert m.infer(request) == []
    assert sent == [(None, True)]  # the second send raised; the request was already complete


def test_decoupled_execute_raising_sends_error_final(load_model):
    code = """
        class TritonPythonModel:
            def execute(self, requests):
                raise RuntimeError("boom")
    """
    m = load_model("boom", code, "model_transaction_policy { decoupled: true }\n")
    sent: list[tuple[object, bool]] = []
    request = make_request("boom", {"IN": np.zeros(1)})
    request.response_sender = lambda response, final: sent.append((response, final))
    assert m.infer(request) == []
    [(error, final)] = sent
    assert final and isinstance(error, InferdError) and "RuntimeError: boom" in error.message


def test_default_mode_may_answer_through_the_sender(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                for request in requests:
                    request.get_response_sender().send(
                        pb_utils.InferenceResponse([pb_utils.Tensor("OUT", request.inputs()[0].as_numpy())]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
    """
    m = load_model("viasender", code)
    [response] = m.infer(make_request("viasender", {"IN": np.array([4])}))
    assert response.outputs[0].data.tolist() == [4]


def test_async_execute(load_model):
    code = """
        import asyncio
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            async def execute(self, requests):
                await asyncio.sleep(0)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy() + 1)])
                        for r in requests]
    """
    m = load_model("asyncmodel", code)
    [response] = m.infer(make_request("asyncmodel", {"IN": np.array([1])}))
    assert response.outputs[0].data.tolist() == [2]


def test_finalize_called_on_close(load_model):
    code = """
        import os

        class TritonPythonModel:
            def initialize(self, args):
                self.marker = os.path.join(args["model_repository"], "finalized")

            def execute(self, requests):
                return []

            def finalize(self):
                open(self.marker, "w").close()
    """
    m = load_model("fin", code)
    marker = m.context.model_dir / "finalized"
    assert not marker.exists()
    m.instance.close()
    assert marker.exists()
    m.instance.close = lambda: None  # the fixture closes again


def test_auto_complete_config(load_model):
    code = """
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
                config.add_input({"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
                config.add_output({"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]})
                config.set_max_batch_size(16)
                config.set_dynamic_batching()
                return config

            def execute(self, requests):
                return []
    """
    m = load_model("auto", code, "", autocomplete=True)
    config = m.context.config
    assert config.max_batch_size == 16
    assert [(i.name, list(i.dims), i.optional) for i in config.input] == [
        ("INPUT0", [4], False),
        ("INPUT1", [4], True),
    ]
    assert [o.name for o in config.output] == ["OUTPUT0"]
    assert config.HasField("dynamic_batching")
    assert json.loads(m.model._args["model_config"])["max_batch_size"] == 16


def test_auto_complete_completes_a_partial_input(tmp_path: Path):
    code = """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
                return config

            def execute(self, requests):
                return []
    """
    model_dir = write_model(tmp_path, "partial", code, 'input [ { name: "X" } ]\n')
    ctx = context_for(model_dir, autocomplete=True)
    assert [(i.name, i.data_type, list(i.dims)) for i in ctx.config.input] == [("X", 8, [2])]


def test_auto_complete_conflict_is_a_clear_error(tmp_path: Path):
    code = """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
                return config

            def execute(self, requests):
                return []
    """
    model_dir = write_model(tmp_path, "conflict", code, 'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    with pytest.raises(InferdError, match=r"model 'conflict'.*the model expects dims \[4\].*specifies dims \[3\]"):
        context_for(model_dir, autocomplete=True)


def test_auto_complete_must_return_the_config(tmp_path: Path):
    code = """
        class TritonPythonModel:
            @staticmethod
            def auto_complete_config(config):
                pass

            def execute(self, requests):
                return []
    """
    model_dir = write_model(tmp_path, "noreturn", code)
    with pytest.raises(InferdError, match="must return a valid pb.ModelConfig object"):
        context_for(model_dir, autocomplete=True)


def test_missing_model_file(tmp_path: Path):
    model_dir = write_model(tmp_path, "nofile", None)
    with pytest.raises(InferdError) as info:
        PythonBackend().load_model(context_for(model_dir))
    assert info.value.kind is ErrorKind.NOT_FOUND
    assert "model 'nofile'" in info.value.message
    assert str(model_dir / "1" / "model.py") in info.value.message


def test_syntax_error_names_model_file_and_line(tmp_path: Path):
    model_dir = write_model(
        tmp_path,
        "broken",
        "class TritonPythonModel:\n    def execute(self, requests)\n        pass\n",
    )
    with pytest.raises(InferdError) as info:
        PythonBackend().load_model(context_for(model_dir))
    message = info.value.message
    assert "model 'broken'" in message and "model.py" in message
    assert "SyntaxError" in message and "line 2" in message


def test_import_error_is_reported(tmp_path: Path):
    model_dir = write_model(tmp_path, "badimport", "import no_such_module_for_inferd\n")
    with pytest.raises(InferdError, match="model 'badimport'.*ModuleNotFoundError.*no_such_module_for_inferd"):
        PythonBackend().load_model(context_for(model_dir))


def test_missing_class(tmp_path: Path):
    model_dir = write_model(tmp_path, "noclass", "class SomethingElse:\n    pass\n")
    with pytest.raises(InferdError, match="model 'noclass'.*no class named 'TritonPythonModel'"):
        PythonBackend().load_model(context_for(model_dir))


def test_initialize_failure_is_a_load_error(load_model):
    code = """
        class TritonPythonModel:
            def initialize(self, args):
                raise RuntimeError("weights missing")

            def execute(self, requests):
                return []
    """
    with pytest.raises(InferdError, match="model 'noinit'.*initialize.*RuntimeError: weights missing"):
        load_model("noinit", code)


def test_sibling_modules_stay_private_to_each_model(load_model):
    code = """
        import numpy as np
        import helpers
        from . import local
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                value = np.array([helpers.VALUE + local.VALUE], dtype=np.int32)
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]) for _ in requests]
    """
    a = load_model("a", code, files={"1/helpers.py": "VALUE = 10\n", "1/local.py": "VALUE = 1\n"})
    b = load_model("b", code, files={"1/helpers.py": "VALUE = 20\n", "1/local.py": "VALUE = 2\n"})
    [ra] = a.infer(make_request("a", {"IN": np.zeros(1)}))
    [rb] = b.infer(make_request("b", {"IN": np.zeros(1)}))
    assert ra.outputs[0].data.tolist() == [11]
    assert rb.outputs[0].data.tolist() == [22]


def test_two_versions_load_side_by_side(tmp_path: Path):
    template = """
        import numpy as np
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor("V", np.array([{v}]))]) for _ in requests]
    """
    model_dir = write_model(tmp_path, "versions", template.format(v=1), version=1)
    write_model(tmp_path, "versions", template.format(v=2), version=2)
    backend = PythonBackend()
    results = []
    for version in (1, 2):
        model = backend.load_model(context_for(model_dir, version=version))
        instance = model.create_instance(InstanceSpec("versions_0", "KIND_CPU", 0, 0, "versions"))
        [response] = instance.execute([make_request("versions", {"IN": np.zeros(1)})])
        results.append((response.model_version, response.outputs[0].data.tolist()))
        instance.close()
        model.unload()
    assert results == [("1", [1]), ("2", [2])]
