"""The bundled example repository (what `make serve` serves) loads and answers correctly."""

from __future__ import annotations

import shutil

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.testing import ServerProcess
from tests.conftest import EXAMPLES
from tests.e2e.example_builder import build_models
from tests.lazy import lazy_import

ort = lazy_import("onnxruntime")


def test_example_repository(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(EXAMPLES, repo, ignore=shutil.ignore_patterns("mlp_onnx", "__pycache__"))
    onnx_path = repo / "mlp_onnx" / "1" / "model.onnx"
    build_models().build_mlp(onnx_path)
    with ServerProcess([repo]) as srv:
        http = httpclient.InferenceServerClient(srv.http_url)
        index = {m["name"]: m["state"] for m in http.get_model_repository_index()}
        assert index == {"add_sub": "READY", "string_identity": "READY", "mlp_onnx": "READY"}

        a = np.array([[1, 2, 3, 4]], np.float32)
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32"), httpclient.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a * 10)
        result = http.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 11)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), -a * 9)

        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        text = grpcclient.InferInput("INPUT", [2], "BYTES")
        text.set_data_from_numpy(np.array([b"abc", b"Hello"], dtype=np.object_))
        out = grpc.infer("string_identity", [text], parameters={"upper": True}).as_numpy("OUTPUT")
        assert out.tolist() == [b"ABC", b"HELLO"]

        x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
        inp = grpcclient.InferInput("INPUT", [2, 8], "FP32")
        inp.set_data_from_numpy(x)
        expected = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"INPUT": x})[0]
        np.testing.assert_allclose(grpc.infer("mlp_onnx", [inp]).as_numpy("OUTPUT"), expected, rtol=1e-5)
        config = http.get_model_config("mlp_onnx")
        assert config["max_batch_size"] > 0 and config["input"][0]["dims"] == [8]  # auto-completed
    # its config.pbtxt names the one field auto-complete would fill with a warning
    assert "autofilled" not in srv.log()
