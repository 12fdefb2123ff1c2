"""A TorchScript sequence model with control inputs and implicit state behind a real ``inferd serve``."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferd.config.parse import parse_config_text
from inferd.testing import ServerProcess
from inferd_backend_pytorch.binding import model_output_names
from tests.lazy import lazy_import
from tests.servers import Servers

#: Built on first use: every xdist worker collects this file, few run it (torch costs ~2 s of CPU to import).
models = lazy_import("tests.plugins.backend_pytorch.models")

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

ACCUMULATE = """
backend: "pytorch"
max_batch_size: 8
sequence_batching {
  control_input [
    { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY__2" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  state [ { input_name: "ACC__3" output_name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    repo = {
        "accumulate": {
            "config.pbtxt": ACCUMULATE,
            "1/model.pt": lambda p: models.save_script(models.Accumulate(), p),
        }
    }
    return serve(repo)


def test_state_output_follows_the_config_outputs() -> None:
    config = parse_config_text('name: "a"\n' + ACCUMULATE, "test")
    assert model_output_names(config) == ["OUTPUT__0", "OUTPUT__1"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_implicit_state_accumulates(server: ServerProcess, protocol: str) -> None:
    lib = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    values = [3, 4, 5]
    got = []
    for i, v in enumerate(values):
        tensor = lib.InferInput("INPUT__0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[v]], np.int32))
        result = client.infer("accumulate", [tensor], sequence_id=9, sequence_start=i == 0, sequence_end=i == 2)
        assert result.as_numpy("OUTPUT__1") is None  # the state output is not returned
        got.append(int(result.as_numpy("OUTPUT__0")[0, 0]))
    assert got == [3, 7, 12]
