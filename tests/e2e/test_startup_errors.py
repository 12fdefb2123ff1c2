"""A plugin that cannot start raises ``inferd.api.StartupError``; ``inferd serve`` prints its message
as ``error: <message>`` and exits with status 1, with no traceback (library code and plugins raise,
only the command line exits).

The plugin is a real distribution installed with pip into a directory on PYTHONPATH; its hooks are
the two places a plugin stops a start: a frontend factory and ``inferd_startup``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import write_repository
from tests.e2e.plugin_site import env_with, install_into

PYPROJECT = """
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "inferd-test-refusing"
version = "0.0.1"
dependencies = []

[project.entry-points.inferd]
refusing = "inferd_test_refusing"
"""

PLUGIN = """
import argparse

from inferd.api import FrontendRegister, ServerSettings, ServerView, StartupError, hookimpl

INFERD_API = (1, 0)


@hookimpl
def inferd_add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--refuse-in", default="", choices=["", "factory", "startup"])


def factory(options: ServerSettings) -> None:
    if options.extra["refuse_in"] == "factory":
        raise StartupError("--refuse-in factory: the licence file is missing")
    return None


@hookimpl
def inferd_register_frontends(register: FrontendRegister) -> None:
    register("refusing", factory)


@hookimpl
def inferd_startup(server: ServerView) -> None:
    if server.options.extra["refuse_in"] == "startup":
        raise StartupError("--refuse-in startup: the licence has expired")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("dist")
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "inferd_test_refusing.py").write_text(PLUGIN)
    return install_into(tmp_path_factory.mktemp("site"), src)


@pytest.mark.parametrize(
    ("where", "sentence"),
    [
        ("factory", "--refuse-in factory: the licence file is missing"),
        ("startup", "--refuse-in startup: the licence has expired"),
    ],
)
def test_a_plugin_refusing_to_start_stops_inferd_serve_with_its_sentence(
    site: Path, tmp_path: Path, where: str, sentence: str
) -> None:
    repo = write_repository(tmp_path / "models", {})
    cmd = [
        sys.executable,
        "-m",
        "inferd.host.cli",
        "serve",
        "--model-repository",
        str(repo),
        "--workers",
        "1",
        "--http-address",
        "127.0.0.1",
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        "--refuse-in",
        where,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env_with(site)}, timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"error: {sentence}"
    assert "Traceback" not in done.stderr
