"""Triton's classification extension: an output requested with ``classification: k`` comes back
as the top ``k`` classes, as BYTES strings ``"<value>:<index>[:<label>]"``.

Labels are read from the output's ``label_filename`` (one label per line, in the model directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inferd.contracts.errors import InvalidArgument
from inferd.contracts.types import InferRequest, InferResponse, InferTensor

KEY = "classification"


class Labelled(Protocol):
    """What :func:`classify` reads of a model version: its name, batching and class labels."""

    name: str
    max_batch_size: int

    def labels(self) -> dict[str, list[str]]: ...


def wants_classification(request: InferRequest) -> bool:
    return any(KEY in o.parameters for o in request.outputs if o.parameters)


def _count(model: str, output: str, raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
        raise InvalidArgument(
            f"model '{model}' output '{output}': 'classification' must be a positive integer, got {raw!r}"
        )
    return raw


def load_labels(model_dir: Path | None, config: Any) -> dict[str, list[str]]:
    """Labels of every output that names a ``label_filename`` (blocking file reads)."""
    labels: dict[str, list[str]] = {}
    for out in config.output:
        if out.label_filename and model_dir is not None:
            path = model_dir / out.label_filename
            try:
                labels[out.name] = path.read_text().splitlines()
            except OSError as exc:
                raise InvalidArgument(
                    f"model '{config.name}' output '{out.name}': cannot read label_filename '{path}': {exc.strerror}"
                ) from None
    return labels


def _format(value: Any, index: int, labels: list[str] | None) -> bytes:
    text = f"{value:f}" if isinstance(value, float) else str(value)
    text = f"{text}:{index}"
    if labels is not None and index < len(labels):
        text = f"{text}:{labels[index]}"
    return text.encode()


def _top_k(tensor: InferTensor, k: int, batched: bool, labels: list[str] | None) -> InferTensor:
    data = np.asarray(tensor.data)
    rows = data.reshape(data.shape[0], -1) if batched and data.ndim > 0 else data.reshape(1, -1)
    k = min(k, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        out[r] = [_format(row[i].item(), int(i), labels) for i in order]
    shape = (rows.shape[0], k) if batched else (k,)
    return InferTensor(tensor.name, "BYTES", shape, out.reshape(shape))


def classify(mv: Labelled, request: InferRequest, response: InferResponse) -> InferResponse:
    """Replace each output requested with ``classification`` by its top-k classes."""
    counts = {
        o.name: _count(mv.name, o.name, o.parameters[KEY])
        for o in request.outputs
        if o.parameters and KEY in o.parameters
    }
    labels = mv.labels()
    outputs = []
    for tensor in response.outputs:
        k = counts.get(tensor.name)
        if k is None:
            outputs.append(tensor)
            continue
        if tensor.datatype in ("BYTES", "BOOL"):
            raise InvalidArgument(
                f"model '{mv.name}' output '{tensor.name}': classification is not available for datatype {tensor.datatype}"
            )
        outputs.append(_top_k(tensor, k, mv.max_batch_size > 0, labels.get(tensor.name)))
    return InferResponse(
        response.model_name, response.model_version, response.id, outputs, response.parameters, response.final
    )
