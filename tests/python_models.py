"""The Python-backend models the tests serve, kept as files: ``tests/fixtures/python_models/<name>/``
holds a model's ``model.py`` and, where it has one, its ``config.pbtxt``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "fixtures" / "python_models"


def source(name: str, file: str = "model.py") -> str:
    """The text of ``file`` (``model.py``, ``config.pbtxt``) of the fixture model ``name``."""
    return (FOLDER / name / file).read_text()


def python_model(name: str, config: str | None = None, versions: Sequence[int] = (1,)) -> dict[str, str]:
    """The fixture model ``name`` as a repository entry for ``write_repository``: ``config`` (else
    its own ``config.pbtxt``) and its ``model.py`` in each version folder."""
    files = {"config.pbtxt": source(name, "config.pbtxt") if config is None else config}
    files.update({f"{v}/model.py": source(name) for v in versions})
    return files
