"""The {{ cookiecutter.backend_name }} plugin, tested through a real ``inferd serve`` with the installed plugin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from inferd.testing import BackendContract, ContractModel, InputSpec, ServerProcess

EXAMPLES = Path(__file__).resolve().parents[1] / "example_models"
MODEL = "{{ cookiecutter.backend_name }}_example"


def test_hooks_import_no_framework():
    """Discovery stays light: importing the hooks module loads neither the backend nor a framework."""
    code = "import {{ cookiecutter.__package_name }}.hooks, sys; print('{{ cookiecutter.__package_name }}.backend' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_plugin_is_discovered():
    out = subprocess.run([sys.executable, "-m", "inferd.host.cli", "plugins"], capture_output=True, text=True).stdout
    assert "backend: {{ cookiecutter.backend_name }}" in out, out


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo") / "models"
    shutil.copytree(EXAMPLES, repo)
    srv = ServerProcess([repo]).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_example_model_echoes(server, protocol):
    client_module = httpclient if protocol == "http" else grpcclient
    client = client_module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    words = np.array([[b"hello", b"inferd"], [b"echo", b"!"]], dtype=np.object_)
    a = client_module.InferInput("INPUT0", [2, 4], "FP32")
    a.set_data_from_numpy(x)
    b = client_module.InferInput("INPUT1", [2, 2], "BYTES")
    b.set_data_from_numpy(words)
    result = client.infer(MODEL, [a, b])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    assert result.as_numpy("OUTPUT1").tolist() == words.tolist()
    client.close()


class Test{{ cookiecutter.__class_prefix }}Contract(BackendContract):
    """inferd's backend contract: load, infer, batch, concurrency, reload, unload, bad inputs, over
    HTTP and gRPC, against one server (``inferd serve`` with the installed plugins)."""

    inputs = [InputSpec("INPUT0", "FP32", (4,)), InputSpec("INPUT1", "BYTES", (2,))]

    def contract_repository(self, root: Path) -> ContractModel:
        shutil.copytree(EXAMPLES / MODEL, root / MODEL)
        return ContractModel(MODEL, lambda inputs: {"OUTPUT0": inputs["INPUT0"], "OUTPUT1": inputs["INPUT1"]})
