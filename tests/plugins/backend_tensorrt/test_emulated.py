"""The backend's real code on an emulated TensorRT + CUDA runtime (see emulation.py): no GPU needed.

This covers what the GPU tests cover except TensorRT itself: config completion from the engine,
per-instance contexts and profiles, buffers, copies, output reshapes, and the whole server path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from inferd import config as cfg
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from inferd.contracts.errors import InferdError, InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.testing import BackendContract, ContractModel, InputSpec, write_repository
from inferd_backend_tensorrt import hooks
from inferd_backend_tensorrt.backend import TensorRTBackend

from .emulation import installed

PLAN = b"EMULATED plan"


def expected(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"OUTPUT0": inputs["INPUT0"] * 2, "OUTPUT1": inputs["INPUT1"].astype(np.int64) + 1}


class TestEmulatedTensorRTContract(BackendContract):
    """The contract through an in-process server; the model has no config.pbtxt."""

    plugins = [hooks]
    inputs = [InputSpec("INPUT0", "FP32", (4,)), InputSpec("INPUT1", "INT32", (1,))]

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def emulation(cls):
        with installed():
            yield

    def contract_repository(self, root: Path) -> ContractModel:
        write_repository(root, {"trt": {"1/model.plan": PLAN}})
        return ContractModel("trt", expected)


# -- the backend without a server ------------------------------------------------------------------


@pytest.fixture
def emulated():
    with installed(gpus=2) as (runtime, engines):
        yield runtime, engines


def load(tmp_path: Path, config_text: str, files: dict[str, bytes] | None = None):
    """Complete, normalize and validate a config as the lifecycle does, then load the model."""
    model_dir = tmp_path / "m"
    write_repository(
        tmp_path, {"m": {"config.pbtxt": 'name: "m"\n' + config_text, **(files or {"1/model.plan": PLAN})}}
    )
    config = cfg.load_config(model_dir)
    backend = TensorRTBackend()
    backend.autocomplete_config(config, model_dir, model_dir / "1")
    cfg.normalize(config, "m", backend.default_model_filename)
    cfg.validate(config)
    context = ModelLoadContext("m", 1, config, model_dir, model_dir / "1", tmp_path)
    return backend.load_model(context), config


def request(rows: int, seed: int = 0, outputs: tuple[str, ...] = ()) -> InferRequest:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (rows, 4)).astype(np.float32)
    y = rng.integers(-9, 9, (rows,)).astype(np.int32)  # the scalar input, after the config's reshape
    inputs = {"INPUT0": InferTensor.from_array("INPUT0", x), "INPUT1": InferTensor.from_array("INPUT1", y)}
    return InferRequest("m", inputs=inputs, outputs=[RequestedOutput(o) for o in outputs])


def check(response: InferResponse | InferdError, req: InferRequest) -> None:
    assert isinstance(response, InferResponse), response
    want = expected({n: t.data for n, t in req.inputs.items()})
    got = {o.name: o.data for o in response.outputs}
    np.testing.assert_array_equal(got["OUTPUT0"], want["OUTPUT0"])
    if "OUTPUT1" in got:
        np.testing.assert_array_equal(got["OUTPUT1"], want["OUTPUT1"][:, None])  # config dims [1], reshape []
        assert got["OUTPUT1"].dtype == np.int64


def test_autocomplete_uses_every_gpu(tmp_path, emulated):
    model, config = load(tmp_path, "")
    js = cfg.config_to_json(config)
    assert js["max_batch_size"] == 8 and js["platform"] == "tensorrt_plan"
    assert [(g["kind"], g["gpus"]) for g in js["instance_group"]] == [("KIND_GPU", [0, 1])]
    assert js["input"][1] == {**js["input"][1], "name": "INPUT1", "dims": [1], "reshape": {"shape": []}}


def test_instances_pick_the_profile_that_fits(tmp_path, emulated):
    runtime, engines = emulated
    model, config = load(
        tmp_path, 'max_batch_size: 16\ninstance_group [{ kind: KIND_GPU gpus: [1] profile: ["0", "1"] }]'
    )
    instance = model.create_instance(InstanceSpec("m_0_0", "KIND_GPU", 1, 0, "m_0"))
    assert runtime.device == 1
    small, large = request(2, 1), request(12, 2)
    [r1] = instance.execute([small])
    [r2] = instance.execute([large])
    check(r1, small)
    check(r2, large)
    engine = engines[-1]
    assert engine.executions == [0, 1]
    with pytest.raises(InvalidArgument, match="no optimization profile of this instance accepts"):
        instance.run({"INPUT0": np.zeros((20, 4), np.float32), "INPUT1": np.zeros((20,), np.int32)})
    instance.close()
    model.unload()


def test_batched_requests_and_requested_outputs(tmp_path, emulated):
    model, _ = load(tmp_path, "")
    instance = model.create_instance(InstanceSpec("m_0_0", "KIND_GPU", 0, 0, "m_0"))
    reqs = [request(1, 3), request(3, 4, outputs=("OUTPUT0",)), request(2, 5)]
    responses = instance.execute(reqs)
    for resp, req in zip(responses, reqs, strict=True):
        check(resp, req)
    assert [o.name for o in responses[1].outputs] == ["OUTPUT0"]
    instance.close()


def test_pinned_memory_can_be_turned_off(tmp_path, emulated):
    runtime, _ = emulated
    text = "optimization { input_pinned_memory { enable: false } output_pinned_memory { enable: false } }"
    model, _ = load(tmp_path, text)
    instance = model.create_instance(InstanceSpec("m_0_0", "KIND_GPU", 0, 0, "m_0"))
    req = request(4, 6)
    check(instance.execute([req])[0], req)
    assert "mallochost" not in runtime.calls and "h2d" in runtime.calls and "d2h" in runtime.calls
    instance.close()
    model.unload()
    assert not runtime.blocks, "every buffer is freed on close"


def test_undeclared_outputs_are_not_returned(tmp_path, emulated):
    text = """max_batch_size: 8
    input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] },
           { name: "INPUT1" data_type: TYPE_INT32 dims: [1] reshape: { shape: [] } }]
    output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]"""
    model, config = load(tmp_path, text)
    assert [o.name for o in config.output] == ["OUTPUT0"]
    instance = model.create_instance(InstanceSpec("m_0_0", "KIND_GPU", 0, 0, "m_0"))
    req = request(2, 7)
    [response] = instance.execute([req])
    assert [o.name for o in response.outputs] == ["OUTPUT0"]
    check(response, req)


def test_dynamic_engines_are_one_per_instance(tmp_path, emulated):
    _, engines = emulated
    model, _ = load(tmp_path, "instance_group [{ kind: KIND_GPU count: 2 gpus: [0] }]")
    before = len(engines)  # the engine read for the config check goes to the first instance
    a = model.create_instance(InstanceSpec("m_0_0", "KIND_GPU", 0, 0, "m_0"))
    b = model.create_instance(InstanceSpec("m_0_1", "KIND_GPU", 0, 1, "m_0"))
    assert len(engines) == before + 1 and a.engine is not b.engine


def test_cc_model_filenames_pick_the_plan_for_the_gpu(tmp_path, emulated):
    text = 'cc_model_filenames { key: "9.0" value: "hopper.plan" }'
    model, config = load(tmp_path, text, {"1/hopper.plan": PLAN, "1/model.plan": b"not a plan"})
    assert config.max_batch_size == 8


def test_errors_name_the_model_and_the_fix(tmp_path, emulated):
    with pytest.raises(InvalidArgument, match="model 'm': TensorRT 10.99-emulated could not deserialize"):
        load(tmp_path / "a", "", {"1/model.plan": b"garbage"})
    with pytest.raises(InvalidArgument, match="instance group 'm_0' has kind KIND_CPU"):
        load(tmp_path / "b", "instance_group [{ kind: KIND_CPU }]")
    lazy = 'parameters { key: "execution_context_allocation_strategy" value: { string_value: "lazy" } }'
    with pytest.raises(InvalidArgument, match="execution_context_allocation_strategy is 'LAZY'"):
        load(tmp_path / "c", lazy)


def test_no_gpu(tmp_path):
    no_gpu = "no NVIDIA GPU is visible to this process .*cudaErrorInsufficientDriver"
    with installed(gpus=0), pytest.raises(InferdError, match=no_gpu):
        load(tmp_path, "")
