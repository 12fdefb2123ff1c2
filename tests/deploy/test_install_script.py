"""scripts/install.sh is the one install: `make install` and both images run it, and it installs a
working inferd into a fresh virtual environment (what the image's build stage does, with the
Python backend only, to keep it short)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.deploy.conftest import ADD_SUB_BODY, ADD_SUB_SUM, ROOT, copy_add_sub, http_post

SCRIPT = "scripts/install.sh"


class VenvServer(ServerProcess):
    """`inferd serve` from another virtual environment's ``bin/inferd``."""

    def __init__(self, venv: Path, repositories: list[Path], log_path: Path) -> None:
        super().__init__(repositories, log_path=log_path)
        self.venv = venv
        self.env.pop("PYTHONPATH", None)  # the venv's own copy, not a checkout's sources

    def command(self) -> list[str]:
        python_m_inferd = 3  # [sys.executable, "-m", "inferd.cli", "serve", ...]
        return [str(self.venv / "bin/inferd"), *super().command()[python_m_inferd:]]


def test_make_install_and_the_images_run_the_same_script():
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", make, re.M)
    assert recipe is not None and SCRIPT in recipe.group(1)
    assert "pip" not in recipe.group(1).replace(SCRIPT, "")  # nothing installed beside it
    for dockerfile in ("Dockerfile", "Dockerfile.gpu"):
        text = (ROOT / dockerfile).read_text()
        (run,) = [line for line in text.splitlines() if line.startswith("RUN") and SCRIPT in line]
        assert 'PLUGINS="$BACKENDS"' in run and "VENV=/opt/inferd" in run
        assert re.search(r'^ARG BACKENDS="python onnx', text, re.M)


@pytest.mark.slow
def test_the_script_installs_a_working_server(tmp_path):
    venv = tmp_path / "venv"
    # --no-compile: no bytecode for numpy, grpcio... (the server runs once)
    outside = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # what the venv holds, not a checkout
    env = {**outside, "VENV": str(venv), "PYTHON": sys.executable, "PLUGINS": "python", "PIP_ARGS": "--no-compile"}
    done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    plugins = subprocess.run([str(venv / "bin/inferd"), "plugins"], capture_output=True, text=True, timeout=120, env=outside)
    assert plugins.returncode == 0, plugins.stderr
    assert re.search(r"^python +inferd-backend-python", plugins.stdout, re.M)
    assert "onnxruntime" not in plugins.stdout
    site = subprocess.run([str(venv / "bin/python"), "-c", "import inferd; print(inferd.__file__)"],
                          capture_output=True, text=True, check=True, env=outside).stdout  # fmt: skip
    assert site.startswith(str(venv))  # a copy in the venv (as in the image), not this checkout
    repo = copy_add_sub(tmp_path / "models")
    with VenvServer(venv, [repo], log_path=tmp_path / "inferd.log") as server:
        status, body = http_post(f"http://{server.http_url}/v2/models/add_sub/infer", ADD_SUB_BODY)
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["data"] == ADD_SUB_SUM


def test_an_unknown_plugin_stops_the_install(tmp_path):
    env = {**os.environ, "VENV": str(tmp_path / "venv"), "PYTHON": sys.executable, "PLUGINS": "python nosuch"}
    done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "no plugin 'nosuch'" in done.stderr
    assert not (tmp_path / "venv").exists()  # refused before anything was created
