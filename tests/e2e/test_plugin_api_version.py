"""A plugin declares the plugin API it was written for (``INFERD_API``); ``inferd serve`` refuses one
built for another major, naming the plugin, its API and the host's, and serves with the rest.

The test builds a real plugin distribution with two entry points, both docs/hooks.md's example
backend (``docs/examples/scale_backend_plugin.py``): ``scale_v1`` as written (API 1.0, backend
``scale``) and ``scale_v2`` declaring API 2.0 (backend ``scale_two``). It installs it with pip into a
directory on PYTHONPATH and runs ``inferd plugins`` and ``inferd serve`` with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.api import API_VERSION
from inferd.testing import ServerProcess, write_repository
from tests.e2e.plugin_site import env_with, install_into

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "scale_backend_plugin.py"

PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "inferd-test-api"
version = "0.0.1"
dependencies = []

[project.entry-points.inferd]
scale_v1 = "inferd_test_api.scale_v1"
scale_v2 = "inferd_test_api.scale_v2"
"""

REFUSED = (
    "plugin 'scale_v2' is built for inferd plugin API 2.0, newer than this inferd's API "
    f"{API_VERSION[0]}.{API_VERSION[1]}; upgrade inferd "
    "or install a release of the plugin for API 1; the plugin is left out"
)


def config(backend: str) -> str:
    return (
        f'backend: "{backend}"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'parameters [ { key: "factor" value: { string_value: "3" } } ]\n'
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The plugin distribution, built from the example written here twice and installed by pip."""
    source = EXAMPLE.read_text()
    assert "INFERD_API = (1, 0)\n" in source and 'register("scale", ScaleBackend)' in source
    newer = source.replace("INFERD_API = (1, 0)\n", "INFERD_API = (2, 0)\n")
    newer = newer.replace('register("scale", ScaleBackend)', 'register("scale_two", ScaleBackend)')
    src = tmp_path_factory.mktemp("dist")
    package = src / "src" / "inferd_test_api"
    package.mkdir(parents=True)
    (src / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "scale_v1.py").write_text(source)
    (package / "scale_v2.py").write_text(newer)
    return install_into(tmp_path_factory.mktemp("site"), src)


def test_inferd_plugins_lists_the_newer_plugin_as_refused(site: Path) -> None:
    env = {**os.environ, **env_with(site)}
    cmd = [sys.executable, "-m", "inferd.host.cli", "plugins"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert result.returncode == 1, result.stdout + result.stderr  # a plugin with an error
    assert "backend: scale" in rows["scale_v1"] and "ERROR" not in rows["scale_v1"]
    assert rows["scale_v2"].endswith(f"ERROR: {REFUSED}"), rows["scale_v2"]
    assert REFUSED in result.stderr  # logged at ERROR too


def test_inferd_serve_refuses_the_newer_plugin_and_serves_with_the_other(site: Path, tmp_path: Path) -> None:
    version = {"1": Path.mkdir}  # the backend reads no file: an empty version directory
    repo = write_repository(
        tmp_path / "models",
        {
            "tripled": {"config.pbtxt": config("scale"), **version},
            "doubled": {"config.pbtxt": config("scale_two"), **version},
        },
    )
    args = ["--model-control-mode=explicit", "--load-model=tripled"]
    with ServerProcess([repo], args, env=env_with(site)) as server:
        assert REFUSED in server.log()
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(8, dtype=np.float32).reshape(2, 4)
        tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer("tripled", [tensor]).as_numpy("OUTPUT0"), data * 3)
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("doubled")
        assert "asks for backend 'scale_two', which no installed plugin provides" in str(caught.value)
