"""Shared fixtures: model repositories of Python-backend models and real inferd servers."""

from __future__ import annotations

import textwrap
from pathlib import Path

pytest_plugins = ["inferd.testing"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "models"


def python_model_files(config: str, model_py: str, versions: tuple[int, ...] = (1,)) -> dict[str, str]:
    """Files of a Python-backend model: config.pbtxt and model.py in each version directory."""
    files = {"config.pbtxt": textwrap.dedent(config)}
    for v in versions:
        files[f"{v}/model.py"] = textwrap.dedent(model_py)
    return files
