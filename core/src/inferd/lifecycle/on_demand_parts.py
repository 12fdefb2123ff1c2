"""The pieces of on-demand loading that hold no state (:mod:`inferd.lifecycle.on_demand`): its
refusal, the placeholder a request sees of a model not loaded, and the ensembles over each model."""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from inferd import config as cfg
from inferd.contracts.errors import InferdError, Unavailable
from inferd.contracts.model_info import ModelInfo, TensorInfo
from inferd.engine.validation import Validator

if TYPE_CHECKING:
    from inferd.contracts.model_info import Servable


#: How long a model whose load on demand failed answers its failure before a request tries again
#: (at once when a scan under poll finds its files changed).
RETRY_FAILED_S = 30.0

#: What a request for a model whose load on demand failed is told to do.
LOAD_ADVICE = (
    f"fix it: a request loads it again after {RETRY_FAILED_S:g} s, or at once when poll finds its files changed"
)


class LoadRefused(Unavailable):
    """A load on demand that could not happen in time: the client may retry after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Gone:
    pass


#: A weak reference that is already dead: a placeholder's handle (no version serves it yet).
GONE = cast("weakref.ref[Servable]", weakref.ref(_Gone()))


def callers_of(calls: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """The ensembles over each model (those over them included), from the models each one's steps call."""
    direct: dict[str, set[str]] = {}
    for ensemble, steps in calls.items():
        for step in steps:
            direct.setdefault(step, set()).add(ensemble)
    every: dict[str, set[str]] = {}
    for step in direct:
        found, todo = set(), [step]
        while todo:
            for caller in direct.get(todo.pop(), ()):
                if caller not in found:
                    found.add(caller)
                    todo.append(caller)
        every[step] = found
    return every


def placeholder(name: str, version: int, config: cfg.ModelConfig | None) -> ModelInfo:
    """What a request sees of a model never loaded: the signature its scanned config declares."""
    config = config if config is not None else cfg.ModelConfig(name=name)
    try:
        validator = Validator(config, name)
    except InferdError:
        validator = Validator(cfg.ModelConfig(name=name), name)
    batch = (-1,) if validator.max_batch_size > 0 else ()
    return ModelInfo(
        name=name,
        version=version,
        platform=config.platform or config.backend,
        inputs=tuple(TensorInfo(s.name, s.datatype, batch + s.dims) for s in validator.inputs.values()),
        outputs=tuple(TensorInfo(s.name, s.datatype, batch + s.dims) for s in validator.outputs.values()),
        max_batch_size=validator.max_batch_size,
        decoupled=config.model_transaction_policy.decoupled,
        validator=validator,
        handle=GONE,
    )
