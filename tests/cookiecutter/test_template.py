"""The backend-plugin template: it renders, and the generated project's own tests pass in a fresh
virtual environment holding only inferd's core, the generated plugin, pytest and tritonclient."""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "cookiecutter"
CORE = ROOT / "core"
INSTALL = ROOT / "scripts" / "install.sh"


def render(out: Path, **context: str) -> Path:
    """``cookiecutter --no-input`` into ``out``; returns the generated project directory."""
    args = [f"{k}={v}" for k, v in context.items()]
    cmd = [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(out), str(TEMPLATE), *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    [project] = [p for p in out.iterdir() if p.is_dir()]
    return project


def _clean_env() -> dict[str, str]:
    drop = {"PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


#: The modules every backend has, for the same jobs: registration, the Backend and its Model, the
#: Instance, the model's parsed parameters.
BACKEND_SHAPE = {"__init__", "hooks", "backend", "instance", "options"}


def test_the_template_and_every_backend_have_one_shape(tmp_path: Path):
    package = render(tmp_path, backend_name="shape") / "src" / "inferd_backend_shape"
    assert {p.stem for p in package.glob("*.py")} == BACKEND_SHAPE
    for plugin in sorted((ROOT / "plugins").glob("backend_*/src/inferd_backend_*")):
        missing = BACKEND_SHAPE - {p.stem for p in plugin.glob("*.py")}
        assert not missing, f"{plugin.relative_to(ROOT)} has no {', '.join(sorted(missing))}"


def test_names_derive_from_the_backend_name(tmp_path: Path):
    project = render(tmp_path, backend_name="my_model")
    assert project.name == "inferd-backend-my-model"
    package = project / "src" / "inferd_backend_my_model"
    backend = (package / "backend.py").read_text()
    assert "class MyModelBackend(Backend)" in backend and 'name = "my_model"' in backend
    pyproject = (project / "pyproject.toml").read_text()
    assert 'my_model = "inferd_backend_my_model.hooks"' in pyproject
    assert 'dependencies = ["inferd>=1,<2"' in pyproject  # the plugin API's major, as INFERD_API says
    assert "\nINFERD_API = (1, 0)\n" in (package / "hooks.py").read_text()
    assert (project / "example_models" / "my_model_example" / "1" / "model.my_model").is_file()
    readme = (project / "README.md").read_text()  # says how to get inferd; no link to nowhere
    assert "pip install -e path/to/inferd/core" in readme and "](https://github.com/)" not in readme
    for path in [p for p in project.rglob("*") if p.is_file()]:
        text = path.read_text()
        assert "{{" not in text and "cookiecutter" not in text, f"unrendered template text in {path}"
        if path.suffix == ".py":
            py_compile.compile(str(path), cfile=str(tmp_path / "compiled.pyc"), doraise=True)


@pytest.mark.slow
def test_generated_plugin_passes_its_tests_in_a_fresh_venv(tmp_path: Path):
    """The generated plugin installed as a plugin author outside this repository would install it with
    inferd's installer: ``scripts/install.sh`` with the project's path in ``PLUGINS`` (its ``[test]``
    extra brings pytest and tritonclient), inferd's core without extras."""
    started = time.monotonic()
    project = render(tmp_path, backend_name="echo")
    venv = tmp_path / "venv"
    env = {**_clean_env(), "VENV": str(venv), "PYTHON": getattr(sys, "_base_executable", sys.executable),
           "CORE_EXTRAS": "", "PLUGINS": f"{project}[test]", "EDITABLE": "1", "COMPILE": "0"}  # fmt: skip
    result = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, f"install.sh failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    python = venv / "bin" / "python"
    installed = time.monotonic()
    tests = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(tests, cwd=project, capture_output=True, text=True, timeout=600, env=_clean_env())
    report = f"{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    assert result.returncode == 0, f"the generated plugin's tests failed:\n{report}"
    assert " passed" in result.stdout and "failed" not in result.stdout and "error" not in result.stdout, report
    print(f"template: install {installed - started:.0f} s, generated tests {time.monotonic() - installed:.0f} s")
