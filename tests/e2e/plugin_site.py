"""A plugin distribution installed as pip installs it (``--target`` a directory), and the environment
that puts that directory on an ``inferd serve``'s path: what the plugin tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def install_into(target: Path, source: Path) -> Path:
    """``pip install --no-deps`` of the distribution at ``source`` into ``target``; returns ``target``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True,
    )  # fmt: skip
    return target


def env_with(site: Path, **extra: str) -> dict[str, str]:
    """Environment variables that put ``site`` first on PYTHONPATH, plus ``extra``."""
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **extra}
