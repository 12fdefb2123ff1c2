"""Write a Triton-layout model repository from a dict."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_repository(root: Path, models: Mapping[str, Mapping[str, Any]]) -> Path:
    """Create ``root/<model>/...`` from ``{model: {relative path: content}}``.

    Content is ``str`` (written as text), ``bytes``, or a callable taking the destination path
    (to build a model file in place, e.g. ``lambda p: onnx.save(graph, p)``). The key
    ``"config.pbtxt"`` is the config; version files use paths like ``"1/model.py"``.
    """
    root.mkdir(parents=True, exist_ok=True)
    for model, files in models.items():
        model_dir = root / model
        model_dir.mkdir(parents=True, exist_ok=True)
        for rel, content in files.items():
            dest = model_dir / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if callable(content):
                content(dest)
            elif isinstance(content, bytes):
                dest.write_bytes(content)
            else:
                dest.write_text(content)
    return root
