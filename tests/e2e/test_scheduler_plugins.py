"""A scheduler from an installed plugin, under a name of its own, serves the models that select it.

The test builds a real plugin distribution (docs/hooks.md's example scheduler ``tagging``), installs
it with pip into a directory on PYTHONPATH, and serves models with ``inferd serve``: one selecting
the scheduler through the ``inferd_scheduler`` config parameter, one Triton config without it, and
one naming a scheduler no plugin registers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.e2e.plugin_site import env_with, install_into
from tests.servers import Servers

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tagging_scheduler_plugin.py"

PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "inferd-test-schedulers"
version = "0.0.1"
dependencies = []

[project.entry-points.inferd]
tagging = "inferd_test_schedulers.tagging"
"""


def selecting(scheduler: str) -> str:
    return f'parameters {{ key: "inferd_scheduler" value: {{ string_value: "{scheduler}" }} }}\n'


TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plugin distribution, built from sources written here and installed by pip."""
    src = tmp_path_factory.mktemp("dist")
    package = src / "src" / "inferd_test_schedulers"
    package.mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "tagging.py").write_text(EXAMPLE.read_text())
    return install_into(tmp_path_factory.mktemp("site"), src)


@pytest.fixture(scope="module")
def server(site, serve: Servers) -> ServerProcess:
    """``inferd serve`` with the plugin installed; ``misnamed`` is in the repository, not loaded."""
    add_sub = {"1/model.py": models.add_sub_py(0)}
    repo = {
        "tagged": {"config.pbtxt": models.ADD_SUB_CONFIG + TWO_INSTANCES + selecting("tagging"), **add_sub},
        "plain": {"config.pbtxt": models.ADD_SUB_CONFIG + "dynamic_batching { }\n", **add_sub},
        "misnamed": {"config.pbtxt": models.ADD_SUB_CONFIG + selecting("priority"), **add_sub},
    }
    return serve(repo, "--model-control-mode=explicit", "--load-model=tagged", "--load-model=plain", env=env_with(site))


def _infer(module, url: str, model: str) -> tuple[np.ndarray, dict[str, str]]:
    """OUTPUT0 of ``model`` for a fixed input, and the response's parameters."""
    client = module.InferenceServerClient(url)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [2, 4], "FP32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    try:
        result = client.infer(model, inputs)
    finally:
        client.close()
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    response = result.get_response()
    if isinstance(response, dict):  # HTTP: JSON
        return result.as_numpy("OUTPUT0"), dict(response.get("parameters", {}))
    return result.as_numpy("OUTPUT0"), {k: v.string_param for k, v in response.parameters.items()}


def test_a_model_selects_a_plugin_scheduler_by_name(server):
    for module, url in ((httpclient, server.http_url), (grpcclient, server.grpc_url)):
        assert _infer(module, url, "tagged")[1] == {"scheduler": "tagging"}
        assert _infer(module, url, "plain")[1] == {}  # no parameter: Triton's choice, the built-in batcher
    stats = httpclient.InferenceServerClient(server.http_url).get_inference_statistics("tagged")
    (model,) = stats["model_stats"]
    assert model["inference_stats"]["success"]["count"] == 2 and model["execution_count"] == 2


def test_an_unknown_scheduler_name_fails_the_load_naming_model_parameter_and_names(server):
    expected = (
        "model 'misnamed': parameter inferd_scheduler names scheduler 'priority', which no installed plugin "
        "registers; registered schedulers: direct, dynamic, ensemble, sequence, tagging"
    )
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as caught:
        http.load_model("misnamed")
    assert "load failed for model 'misnamed'" in str(caught.value) and expected in str(caught.value)
    assert caught.value.status() == "400"
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as caught:
        grpc.load_model("misnamed")
    assert expected in str(caught.value) and caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["misnamed"]["state"] == "UNAVAILABLE" and expected in index["misnamed"]["reason"]
    assert http.is_model_ready("tagged") and not http.is_model_ready("misnamed")
