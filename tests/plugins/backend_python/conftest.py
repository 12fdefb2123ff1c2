"""Helpers that build a Python model on disk and load it with the backend directly (no server)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.config import parse_config_text
from inferd.contracts.backend import InstanceSpec, ModelLoadContext, SyncInstance
from inferd.contracts.types import InferRequest, InferTensor, RequestedOutput
from inferd_backend_python.backend import PythonBackend, PythonModel


@dataclass
class Loaded:
    model: PythonModel
    instance: SyncInstance  # in-process: a PythonInstance
    context: ModelLoadContext

    def infer(self, *requests: InferRequest) -> list[Any]:
        return self.instance.execute(list(requests))


def write_model(
    root: Path,
    name: str,
    code: str,
    config: str = "",
    version: int = 1,
    files: dict[str, str] | None = None,
) -> Path:
    """Write ``<root>/<name>/config.pbtxt`` and ``<root>/<name>/<version>/model.py``."""
    model_dir = root / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + textwrap.dedent(config))
    if code is not None:
        (version_dir / "model.py").write_text(textwrap.dedent(code))
    for rel, text in (files or {}).items():
        (model_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / rel).write_text(textwrap.dedent(text))
    return model_dir


def context_for(model_dir: Path, version: int = 1, models: Any = None, autocomplete: bool = False) -> ModelLoadContext:
    text = (model_dir / "config.pbtxt").read_text()
    config = parse_config_text(text, str(model_dir / "config.pbtxt"))
    if autocomplete:
        PythonBackend().autocomplete_config(config, model_dir, None)
    if not config.default_model_filename:
        config.default_model_filename = PythonBackend.default_model_filename
    return ModelLoadContext(
        name=model_dir.name,
        version=version,
        config=config,
        model_dir=model_dir,
        version_dir=model_dir / str(version),
        repository=model_dir.parent,
        models=models,
    )


@pytest.fixture
def load_model(tmp_path: Path) -> Callable[..., Loaded]:
    """``load_model(name, code, config, **kw)`` -> a loaded model with one CPU instance."""
    opened: list[Loaded] = []

    def load(
        name: str,
        code: str,
        config: str = "",
        *,
        models: Any = None,
        autocomplete: bool = False,
        files: dict[str, str] | None = None,
    ) -> Loaded:
        model_dir = write_model(tmp_path, name, code, config, files=files)
        ctx = context_for(model_dir, models=models, autocomplete=autocomplete)
        model = PythonBackend().load_model(ctx)
        instance = model.create_instance(InstanceSpec(f"{name}_0", "KIND_CPU", 0, 0, name))
        loaded = Loaded(model, instance, ctx)  # type: ignore[arg-type]
        opened.append(loaded)
        return loaded

    yield load
    for loaded in opened:
        loaded.instance.close()
        loaded.model.unload()


def make_request(model: str, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] = (), **kw: Any) -> InferRequest:
    return InferRequest(
        model_name=model,
        inputs={n: InferTensor.from_array(n, a) for n, a in inputs.items()},
        outputs=[RequestedOutput(o) for o in outputs],
        **kw,
    )
