"""A config whose dims disagree with the ONNX model's in one dimension's size, not their count:
the load error names that dimension and both sizes (a real server, a load over HTTP)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from onnx import TensorProto, helper

from inferd.testing import ServerProcess, write_repository

from . import models as m

CONFIG = """
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 9 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 8 ] } ]
"""


def test_a_dimension_of_another_size_is_named(tmp_path: Path) -> None:
    graph = m.make_model(
        [helper.make_node("Identity", ["X"], ["Y"])],
        [m.vi("X", TensorProto.FLOAT, ["batch", 8])],
        [m.vi("Y", TensorProto.FLOAT, ["batch", 8])],
    )
    repo = write_repository(
        tmp_path / "models", {"wide": {"config.pbtxt": CONFIG, "1/model.onnx": graph.SerializeToString()}}
    )
    with ServerProcess([repo], ["--model-control-mode=explicit"]) as server:
        request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/wide/load", b"{}")
        try:
            urllib.request.urlopen(request, timeout=60).close()
            raise AssertionError("the load succeeded")
        except urllib.error.HTTPError as exc:
            status, error = exc.code, json.loads(exc.read())["error"]
    assert status == 400
    assert "the model expects 2 dimensions (shape [-1,8]) but the model configuration specifies 2 dimensions" in error
    assert error.endswith("; dimension 1 differs: the model has 8, the configuration 9")
