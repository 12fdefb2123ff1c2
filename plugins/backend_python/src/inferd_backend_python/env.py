"""``EXECUTION_ENV_PATH``: a model's own Python environment, as Triton's python backend takes it.

The value is a conda-pack ``.tar.gz`` (or any tar archive) or an unpacked environment directory;
``$$TRITON_MODEL_DIRECTORY`` in it stands for the model's directory. An archive is extracted once
per server process (again when the file changes) into a private temporary directory, with
``tarfile``'s ``tar`` filter (no absolute or ``..`` member paths). As in Triton the environment
must hold ``bin/activate``; its stub runs with ``VIRTUAL_ENV`` set, ``<env>/bin`` first on ``PATH``,
``<env>/lib`` first on ``LD_LIBRARY_PATH``, and neither ``PYTHONHOME`` nor the server's
``PYTHONPATH``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from inferd.api import InternalError, InvalidArgument

MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"

_lock = threading.Lock()
#: Archives extracted by this process: (path, size, mtime) -> directory.
_extracted: dict[tuple[str, int, int], Path] = {}


@dataclass(frozen=True)
class Environment:
    """Where an isolated model's interpreter is and what its process environment is."""

    python: str
    variables: dict[str, str]
    source: str


def resolve(value: str, model_dir: Path) -> Path:
    """The path ``EXECUTION_ENV_PATH`` names, with ``$$TRITON_MODEL_DIRECTORY`` replaced."""
    return Path(value.replace(MODEL_DIRECTORY, str(model_dir)))


def prepare(path: Path, label: str) -> Environment:
    """Extract ``path`` if it is an archive; the environment's interpreter and variables (blocking)."""
    if not path.exists():
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' does not exist")
    root = path if path.is_dir() else _extract(path, label)
    activate = root / "bin" / "activate"
    if not activate.is_file():
        raise InternalError(
            f"Path {activate} does not exist. The Python environment should contain an 'activate' script."
        )
    python = next((root / "bin" / n for n in ("python3", "python") if (root / "bin" / n).exists()), None)
    if python is None:
        raise InvalidArgument(f"{label}: EXECUTION_ENV_PATH '{path}' has no bin/python3 or bin/python")
    variables = dict(os.environ)
    for name in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP"):
        variables.pop(name, None)
    variables["VIRTUAL_ENV"] = str(root)
    variables["PATH"] = f"{root / 'bin'}:{variables.get('PATH', '')}".rstrip(":")
    variables["LD_LIBRARY_PATH"] = f"{root / 'lib'}:{variables.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    variables["PYTHONNOUSERSITE"] = "1"
    return Environment(str(python), variables, str(path))


def _extract(path: Path, label: str) -> Path:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _lock:
        found = _extracted.get(key)
        if found is not None and found.is_dir():
            return found
        target = Path(tempfile.mkdtemp(prefix="inferd-python-env-"))
        atexit.register(shutil.rmtree, target, True)
        try:
            with tarfile.open(path) as archive:
                archive.extractall(target, filter="tar")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise InvalidArgument(f"{label}: cannot extract EXECUTION_ENV_PATH '{path}': {exc}") from exc
        _extracted[key] = target
        return target
