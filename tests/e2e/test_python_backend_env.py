"""``EXECUTION_ENV_PATH`` against a real ``inferd serve``: a model runs in its own Python environment.

The test builds a real environment: a venv (``python -m venv``, with ``bin/activate`` as conda-pack
archives have) holding ``envonly_pkg``, a package written here that the server's environment does
not have, and numpy (linked in from the server's environment to keep the archive small: the stub
needs it, as Triton's does). It is packed as a ``.tar.gz`` in the model's directory and named with
``$$TRITON_MODEL_DIRECTORY``; a second model uses the unpacked directory; a third names an
environment without numpy and must fail to load with a clear reason.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "INFO" data_type: TYPE_STRING dims: [ 3 ] } ]
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "%s" } }
"""
# Imports the package only its environment has, at import time (so the server never imports it).
MODEL_PY = source("python_backend_env")


def _make_env(root: Path, with_numpy: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    purelib = Path(
        subprocess.run(
            [str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()
    )  # fmt: skip
    pkg = purelib / "envonly_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('NAME = "envonly_pkg"\nOFFSET = 1000\n')
    if with_numpy:
        ours = Path(sysconfig.get_paths()["purelib"])
        for name in ("numpy", "numpy.libs"):
            if (ours / name).exists():
                (purelib / name).symlink_to(ours / name)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, serve: Servers) -> ServerProcess:
    base = tmp_path_factory.mktemp("pyenv")
    env = _make_env(base / "env", with_numpy=True)
    bare = _make_env(base / "bare", with_numpy=False)
    files = {"1/model.py": textwrap.dedent(MODEL_PY)}
    repo = write_repository(
        base / "models",
        {
            "packed": {"config.pbtxt": CONFIG % "$$TRITON_MODEL_DIRECTORY/env.tar.gz", **files},
            "unpacked": {"config.pbtxt": CONFIG % env, **files},
            "no_numpy": {"config.pbtxt": CONFIG % bare, **files},
        },
    )
    with tarfile.open(repo / "packed" / "env.tar.gz", "w:gz", compresslevel=1) as archive:
        archive.add(env, arcname=".")
    return serve(repo, "--exit-on-error=false", "--strict-readiness=false")


def _wait_loaded(client: httpclient.InferenceServerClient, names: set[str]) -> dict[str, dict]:
    import time

    deadline = time.monotonic() + 120
    while True:
        index = {row["name"]: row for row in client.get_model_repository_index()}
        if all(index.get(n, {}).get("state") in ("READY", "UNAVAILABLE") for n in names):
            return index
        assert time.monotonic() < deadline, index
        time.sleep(0.2)


def test_the_server_does_not_have_the_package():
    assert subprocess.run([sys.executable, "-c", "import envonly_pkg"], capture_output=True).returncode != 0


@pytest.mark.parametrize("model", ["packed", "unpacked"])
def test_a_model_imports_a_package_only_its_environment_has(server, model):
    client = httpclient.InferenceServerClient(server.http_url)
    index = _wait_loaded(client, {"packed", "unpacked", "no_numpy"})
    assert index[model]["state"] == "READY", index[model]
    x = httpclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([7], np.int32))
    result = client.infer(model, [x])
    assert result.as_numpy("OUT").tolist() == [1007]
    name, prefix, leak = (v.decode() for v in result.as_numpy("INFO"))
    assert name == "envonly_pkg" and leak == "isolated"
    assert prefix != sys.prefix  # the environment's interpreter, not the server's
    if model == "packed":
        assert "inferd-python-env-" in prefix  # extracted from the archive
    else:
        assert prefix.endswith("/env")


def test_an_environment_without_the_stubs_needs_fails_to_load_clearly(server):
    client = httpclient.InferenceServerClient(server.http_url)
    row = _wait_loaded(client, {"packed", "unpacked", "no_numpy"})["no_numpy"]
    assert row["state"] == "UNAVAILABLE"
    assert "EXECUTION_ENV_PATH" in row["reason"] and "cannot run the python backend stub" in row["reason"], row
    assert "No module named 'numpy'" in row["reason"], row
