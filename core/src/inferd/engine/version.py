"""A loaded model version: config, backend model, instances, scheduler and statistics."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.contracts.dataplane import ServedModel
from inferd.contracts.model_info import ModelInfo, TensorInfo
from inferd.contracts.types import InferRequest, InferResponse
from inferd.engine.classification import classify, wants_classification
from inferd.engine.validation import Validator

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.contracts.backend import Model
    from inferd.contracts.scheduler import Scheduler
    from inferd.contracts.validation import TensorSpec
    from inferd.engine.response_cache import ModelCache
    from inferd.engine.runner import Runner
    from inferd.engine.stats import ModelStats

log = logging.getLogger(__name__)


class ModelVersion:
    """One servable version. The builder makes it; the data plane calls :meth:`infer`."""

    def __init__(
        self,
        name: str,
        version: int,
        config: ModelConfig,
        model: Model | None,
        runners: list[Runner],
        scheduler: Scheduler,
        stats: ModelStats,
        model_dir: Path | None = None,
        output_labels: dict[str, list[str]] | None = None,
        namespace: str = "",
    ) -> None:
        self.name = name
        #: ``--model-namespacing``: the repository it was loaded from, as given (the metrics' ``namespace``).
        self.namespace = namespace
        self.version = version
        self.config = config
        self.model = model
        self.runners = runners
        self.scheduler = scheduler
        self.stats = stats
        #: ``<repository>/<model>``: where config-relative files (initial_state data, labels) live.
        self.model_dir = model_dir
        self.output_labels = output_labels or {}
        self.max_batch_size = config.max_batch_size
        #: Read after the scheduler was made: an ensemble's scheduler derives it from its steps.
        self.decoupled = config.model_transaction_policy.decoupled
        self.validator = Validator(config, name)
        #: Set by the builder when the server has a cache and the config enables it.
        self.cache: ModelCache | None = None
        self._reshapes = {t.name: tuple(t.reshape.shape) for t in config.input if t.HasField("reshape")}
        #: What frontends see of this version (built once; it refers back to it weakly).
        self.info = _describe(self)
        #: What frontends with a catalog of their own see of it (the OpenAI API's models and adapters).
        self.served = ServedModel(
            self.info,
            model_dir,
            model.lora_adapters if model is not None else (),
            model.chat_engine if model is not None else None,
        )

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, apply config reshapes, and hand the request to the cache or the scheduler."""
        self.validator.validate(request)
        if self._reshapes:
            self._apply_reshapes(request)
        if self.cache is not None:
            response = await self.cache.infer(request, self.scheduler.enqueue)
        else:
            response = await self.scheduler.enqueue(request)
        if request.outputs and wants_classification(request):
            return classify(self, request, response)
        return response

    def labels(self) -> dict[str, list[str]]:
        """Class labels by output name (from ``label_filename``), read when the version loaded."""
        return self.output_labels

    def _apply_reshapes(self, request: InferRequest) -> None:
        batched = self.max_batch_size > 0
        for name, shape in self._reshapes.items():
            tensor = request.inputs.get(name)
            if tensor is None:
                continue
            full = ((tensor.shape[0],) if batched else ()) + shape
            tensor.data = tensor.data.reshape(full)
            tensor.shape = tuple(tensor.data.shape)

    async def stop(self, timeout: float | None = None) -> None:
        """Drain the scheduler (in-flight requests finish). Past ``timeout`` seconds, instances
        still executing are abandoned (``Runner.abandon``: their requests fail, their
        threads are left behind), and the drain gets as long again before the version goes anyway."""
        draining = asyncio.ensure_future(self.scheduler.stop())
        done, _ = await asyncio.wait({draining}, timeout=timeout)
        if done:
            draining.result()
            return
        stuck = [seconds for seconds in (r.abandon() for r in self.runners) if seconds is not None]
        log.error(
            "model '%s' version %d: %d request(s) still in flight after %.1f s of unloading; abandoned %d "
            "instance(s) stuck in execute (for up to %.1f s), their threads left running",
            self.name,
            self.version,
            self.scheduler.inflight(),
            timeout,
            len(stuck),
            max(stuck, default=0.0),
        )
        done, _ = await asyncio.wait({draining}, timeout=timeout)
        if done:
            draining.result()
            return
        draining.cancel()
        log.error(
            "model '%s' version %d: %d request(s) still in flight; unloaded anyway",
            self.name,
            self.version,
            self.scheduler.inflight(),
        )

    def close(self) -> None:
        """Close instances and unload the backend model (blocking: run off the event loop)."""
        for runner in self.runners:
            runner.close()
        if self.model is not None:
            self.model.unload()


def _describe(version: ModelVersion) -> ModelInfo:
    """The :class:`ModelInfo` of a fully assembled version (its scheduler set)."""
    validator = version.validator
    batch = (-1,) if validator.max_batch_size > 0 else ()

    def tensors(specs: Mapping[str, TensorSpec]) -> tuple[TensorInfo, ...]:
        return tuple(TensorInfo(s.name, s.datatype, batch + s.dims) for s in specs.values())

    config = version.config
    return ModelInfo(
        name=version.name,
        version=version.version,
        platform=config.platform or config.backend,
        inputs=tensors(validator.inputs),
        outputs=tensors(validator.outputs),
        max_batch_size=validator.max_batch_size,
        decoupled=version.decoupled,
        validator=validator,
        handle=weakref.ref(version),
    )
