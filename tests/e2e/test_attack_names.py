"""A model load whose name leaves the repository (gRPC carries '/' in a name, HTTP cannot): refused
before any file is written, over both gRPC transports, and the server keeps serving.

The real Triton 2.51 answers a load of ``../x`` *without* files with "failed to load '../x', failed
to poll from model repository"; *with* ``file:`` overrides it writes the files outside its
temporary folder and imports the planted ``model.py`` (checked: a marker file appeared), and a
name holding a newline aborts it. inferd refuses every such name with Triton's sentence first.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers

CONFIG = json.dumps({
    "backend": "python", "max_batch_size": 0,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
})  # fmt: skip
# Imported by the Python backend when the model loads: proof that planted code ran.
PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text("planted code ran")


class TritonPythonModel:
    def execute(self, requests):
        return []
"""
BAD_NAMES = ["..", ".", "a/b", "a\\b", "a\nb", "a\0b", "x" * 256]


@pytest.fixture(scope="module", params=["grpcio", "h2"])
def server(request: pytest.FixtureRequest, serve: Servers) -> Iterator[ServerProcess]:
    args = ["--model-control-mode=explicit", "--load-model=add_sub", "--grpc-transport", str(request.param)]
    with serve({"add_sub": models.add_sub()}, *args) as srv:
        yield srv


@pytest.fixture
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def _shown(name: str) -> str:
    """A name as inferd's errors quote it: whole up to 255 characters."""
    return name if len(name) <= 255 else name[:252] + "..."


def _serves(client: grpcclient.InferenceServerClient) -> None:
    inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.ones((1, 4), np.float32))
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2, np.float32))


def _refused(client: grpcclient.InferenceServerClient, name: str, **kwargs: object) -> str:
    with pytest.raises(InferenceServerException) as err:
        client.load_model(name, **kwargs)  # type: ignore[arg-type]
    assert err.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    return str(err.value.message())


def test_a_load_whose_name_climbs_out_writes_nothing_and_runs_nothing(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = tmp_path / "marker"
    name = "../" * 16 + str(outside).lstrip("/") + "/evil"  # from any temporary folder up to '/', then down
    code = PLANTED.format(marker=str(marker)).encode()
    message = _refused(client, name, config=CONFIG, files={"file:1/model.py": code})
    assert message.startswith(f"failed to load '{name}', failed to poll from model repository; ")
    assert "cannot hold '/'" in message
    assert list(outside.iterdir()) == [] and not marker.exists()
    assert name not in [m["name"] for m in client.get_model_repository_index(as_json=True).get("models", [])]
    _serves(client)


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda name: repr(name)[:12])
def test_names_that_are_no_directory_names_are_refused_with_tritons_sentence(
    client: grpcclient.InferenceServerClient, name: str, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    code = PLANTED.format(marker=str(marker)).encode()
    for kwargs in ({}, {"config": CONFIG, "files": {"file:1/model.py": code}}):
        message = _refused(client, name, **kwargs)
        assert message.startswith(f"failed to load '{_shown(name)}', failed to poll from model repository; ")
        assert "the model name is not valid" in message
    assert not marker.exists()
    with pytest.raises(InferenceServerException) as err:
        client.unload_model(name)
    assert err.value.message().startswith(f"failed to unload '{_shown(name)}'; the model name is not valid")
    assert client.is_server_live()
    _serves(client)


@pytest.mark.parametrize("rel", ["../model.py", "1/../../x.py", "1/./model.py", "1\\model.py", "1/a\nb.py"], ids=repr)
def test_override_file_names_are_plain_names(client: grpcclient.InferenceServerClient, rel: str) -> None:
    message = _refused(client, "ghost", config=CONFIG, files={f"file:{rel}": b"x = 1\n"})
    assert message.startswith("failed to load 'ghost', failed to poll from model repository: file path 'file:")
    assert "ghost" not in [m["name"] for m in client.get_model_repository_index(as_json=True).get("models", [])]


def test_http_refuses_the_same_names(server: ServerProcess) -> None:
    for name in ("..", "a\\b", "a\nb"):
        url = f"http://{server.http_url}/v2/repository/models/{urllib.parse.quote(name, safe='')}/load"
        request = urllib.request.Request(url, b"{}", {"Content-Type": "application/json"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 400
        body = json.loads(err.value.read())
        assert body["error"].startswith(f"failed to load '{name}', failed to poll from model repository; ")
