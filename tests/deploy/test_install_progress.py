"""``scripts/install.sh`` on a terminal lets the installer show what it downloads and installs (no
``-q``); into a pipe or a log it stays quiet, one line per step."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT, SCRIPT, installed_uv


def run_install(tmp_path: Path, terminal: bool) -> list[str]:
    """install.sh with a uv that records its arguments; its stdout a terminal or a pipe."""
    fake_uv = tmp_path / "uv"
    real_uv = installed_uv()
    fake_uv.write_text(
        (
            f'#!/bin/sh\n[ "$1" = venv ] && exec {real_uv} "$@"\n'
            if real_uv
            else '#!/bin/sh\n[ "$1" = venv ] && exit 0\n'
        )
        + 'printf "%s\\n" "$@" >>"$0.args"\n'
    )
    fake_uv.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env.update(VENV=str(tmp_path / "venv"), PYTHON=sys.executable, PLUGINS="python", UV=str(fake_uv))
    if terminal:
        leader, follower = pty.openpty()
        try:
            done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, stdout=follower, stderr=subprocess.PIPE,
                                  timeout=300)  # fmt: skip
        finally:
            os.close(follower)
            os.close(leader)
    else:
        done = subprocess.run(["sh", SCRIPT], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "uv.args").read_text().splitlines()


@pytest.mark.parametrize("terminal", [True, False])
def test_the_installer_shows_its_progress_only_on_a_terminal(tmp_path: Path, terminal: bool) -> None:
    args = run_install(tmp_path, terminal)
    assert args[:2] == ["pip", "install"]
    assert ("-q" in args) is not terminal, args
