"""An ensemble's dataflow graph: its steps, their order, and the checks Triton makes at load.

A :class:`Plan` is built once per ensemble version. Structural checks (a cycle, an unused input)
need only the ensemble's config; :meth:`Plan.bind` then checks every step against the config of
the model it calls (which must be loaded), and works out whether the ensemble is decoupled.
``cfg.validate`` has already refused tensors written twice, dangling step inputs and ensemble
outputs no step writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from inferd.contracts.errors import ConfigError, InferdError
from inferd.contracts.types import InferTensor
from inferd.datatypes import config_to_wire

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.contracts.scheduler import ModelCaller


@dataclass(slots=True)
class Step:
    """One ``ensemble_scheduling.step``, with its mappings as ``(model tensor, ensemble tensor)``."""

    index: int
    model: str
    version: str  # "" = the latest ready version (model_version -1)
    #: The key the step's model is called by (``ModelCaller.step_key``): set by :meth:`Plan.bind`.
    key: str
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    decoupled: bool = False
    #: Ensemble tensors this step reads (values of input_map).
    reads: frozenset[str] = frozenset()
    #: Inputs whose batch dimension may need adding or removing (:class:`BatchFix`); empty when
    #: the step batches as the models that produce its inputs do.
    fixes: tuple[BatchFix, ...] = ()

    @property
    def label(self) -> str:
        version = f" version {self.version}" if self.version else ""
        return f"step {self.index} (model '{self.model}'{version})"


@dataclass(frozen=True, slots=True)
class BatchFix:
    """Triton's ``ReshapeTensorDims`` for one tensor passed between a batching and a non-batching
    model: ``add`` gives a tensor from a non-batching producer a batch of 1 when its shape is the
    consumer's dims (else it is taken as already batched); otherwise a batch-of-1 tensor loses
    its batch dimension when its shape is not the non-batching consumer's dims."""

    name: str  # the consumer's tensor (step input or ensemble output)
    add: bool
    dims: tuple[int, ...]  # the consumer's config dims (without the batch dimension)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        """The shape to pass on, or ``None`` to pass ``shape`` as it is."""
        if self.add:
            return (1, *shape) if _dims_agree(self.dims, shape) else None
        if shape and shape[0] == 1 and not _dims_agree(self.dims, shape):
            return shape[1:]
        return None

    def apply(self, tensor: InferTensor) -> InferTensor:
        shape = self.shape(tensor.shape)
        if shape is None:
            return tensor
        data = tensor.data
        if isinstance(data, np.ndarray) and data.shape == tensor.shape:
            data = data.reshape(shape)
        return InferTensor(tensor.name, tensor.datatype, shape, data, tensor.parameters)


@dataclass(slots=True)
class _Tensor:
    """What one producer or consumer says an ensemble tensor is."""

    datatype: str
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]
    source: str


@dataclass
class Plan:
    """The steps of an ensemble in a valid run order, and what each requested output needs."""

    name: str
    steps: list[Step]
    inputs: list[str]
    outputs: list[str]
    optional_inputs: frozenset[str] = frozenset()
    #: Index of the decoupled step whose responses the ensemble's outputs descend from (-1: none).
    output_origin: int = -1
    #: For each decoupled step, the indices of the steps that consume its responses.
    downstream: dict[int, frozenset[int]] = field(default_factory=dict)
    #: Ensemble outputs whose batch dimension may need adding or removing (see :class:`BatchFix`).
    output_fixes: dict[str, BatchFix] = field(default_factory=dict)
    _pruned: dict[frozenset[str], list[Step]] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: ModelConfig) -> Plan:
        steps = []
        for i, s in enumerate(config.ensemble_scheduling.step):
            inputs = tuple(sorted(s.input_map.items()))
            steps.append(
                Step(
                    i,
                    s.model_name,
                    "" if s.model_version < 0 else str(s.model_version),
                    s.model_name,
                    inputs,
                    tuple(sorted(s.output_map.items())),
                    reads=frozenset(t for _, t in inputs),
                )
            )
        plan = cls(
            config.name,
            steps,
            [t.name for t in config.input],
            [t.name for t in config.output],
            frozenset(t.name for t in config.input if t.optional),
        )
        plan.steps = plan._ordered()
        plan._check_inputs_used()
        return plan

    # -- structure ------------------------------------------------------------------------------

    def _fail(self, message: str) -> ConfigError:
        return ConfigError(f"ensemble '{self.name}': {message}")

    def _producers(self) -> dict[str, Step]:
        return {t: s for s in self.steps for _, t in s.outputs}

    def _ordered(self) -> list[Step]:
        """The steps in an order where each runs after the steps it reads from; refuses cycles."""
        producers = self._producers()
        order: list[Step] = []
        state: dict[int, int] = {}  # 1: visiting, 2: done

        def visit(step: Step, path: list[Step]) -> None:
            if state.get(step.index) == 2:
                return
            if state.get(step.index) == 1:
                cycle = path[path.index(step) :] + [step]
                raise self._fail("its steps form a cycle: " + " -> ".join(s.label for s in cycle))
            state[step.index] = 1
            for tensor in sorted(step.reads):
                producer = producers.get(tensor)
                if producer is not None:
                    visit(producer, path + [step])
            state[step.index] = 2
            order.append(step)

        for step in self.steps:
            visit(step, [])
        return order

    def _check_inputs_used(self) -> None:
        read = {t for s in self.steps for t in s.reads} | set(self.outputs)
        for name in self.inputs:
            if name not in read:
                raise self._fail(f"ensemble input '{name}' is not used by any step")

    def steps_for(self, wanted: Iterable[str]) -> list[Step]:
        """The steps needed to produce the ``wanted`` ensemble outputs, in run order (cached)."""
        key = frozenset(wanted)
        cached = self._pruned.get(key)
        if cached is not None:
            return cached
        producers = self._producers()
        needed: set[int] = set()
        todo = [producers[t] for t in key if t in producers]
        while todo:
            step = todo.pop()
            if step.index in needed:
                continue
            needed.add(step.index)
            todo.extend(producers[t] for t in step.reads if t in producers)
        pruned = [s for s in self.steps if s.index in needed]
        if len(self._pruned) < 64:
            self._pruned[key] = pruned
        return pruned

    # -- binding to the loaded step models ------------------------------------------------------

    def bind(self, config: ModelConfig, models: ModelCaller, namespace: str = "") -> bool:
        """Find each step's model (in ``namespace``, the ensemble's repository, first), check the
        step against its config; return whether the ensemble is decoupled."""
        batching = config.max_batch_size > 0
        tensors: dict[str, _Tensor] = {}
        for t in config.input:
            dims = tuple(t.reshape.shape) if t.HasField("reshape") else tuple(t.dims)
            tensors[t.name] = _tensor(t, dims, batching, f"ensemble '{self.name}' input")
        for t in config.output:
            dims = tuple(t.reshape.shape) if t.HasField("reshape") else tuple(t.dims)
            self._agree(tensors, t.name, _tensor(t, dims, batching, f"ensemble '{self.name}' output"))
        configs: dict[int, ModelConfig] = {}
        for step in sorted(self.steps, key=lambda s: s.index):
            step_config = configs[step.index] = self._step_config(step, models, namespace)
            limit = step_config.max_batch_size
            if limit != 0 and limit < config.max_batch_size:
                raise self._fail(
                    f"its max_batch_size is {config.max_batch_size}, but {step.label} allows at most {limit}"
                )
            self._check_mapping(step, step_config, tensors)
            step.decoupled = step_config.model_transaction_policy.decoupled
        self._check_decoupled()
        self._plan_batch_fixes(config, configs)
        return any(s.decoupled for s in self.steps)

    def _plan_batch_fixes(self, config: ModelConfig, configs: dict[int, ModelConfig]) -> None:
        """Where a tensor goes between a batching and a non-batching model (either may be the
        ensemble itself), plan the batch dimension's fix as Triton's ensemble scheduler makes it."""
        batches = dict.fromkeys(self.inputs, config.max_batch_size > 0)
        for step in self.steps:
            for _, tensor in step.outputs:
                batches[tensor] = configs[step.index].max_batch_size > 0
        for step in self.steps:
            step_config = configs[step.index]
            batching = step_config.max_batch_size > 0
            specs = {t.name: t for t in step_config.input}
            step.fixes = tuple(
                BatchFix(name, batching, tuple(specs[name].dims))
                for name, tensor in step.inputs
                if batches.get(tensor, batching) != batching
            )
        batching = config.max_batch_size > 0
        self.output_fixes = {
            t.name: BatchFix(t.name, batching, tuple(t.dims))
            for t in config.output
            if batches.get(t.name, batching) != batching
        }

    def output_labels(self, config: ModelConfig, models: ModelCaller) -> dict[str, list[str]]:
        """Labels of the ensemble outputs that name no ``label_filename``: those of the step output
        each comes from (Triton completes an ensemble's labels this way when it loads)."""
        wanted = {t.name for t in config.output if not t.label_filename}
        labels: dict[str, list[str]] = {}
        for step in self.steps:
            for name, tensor in step.outputs:
                if tensor in wanted:
                    found = models.model_labels(step.key, step.version).get(name)
                    if found:
                        labels[tensor] = found
        return labels

    def _step_config(self, step: Step, models: ModelCaller, namespace: str) -> ModelConfig:
        if step.model == self.name:
            raise self._fail(f"{step.label} calls the ensemble itself")
        try:
            step.key = models.step_key(namespace, step.model)
        except InferdError as exc:
            raise self._fail(f"{step.label} calls a model that is not available: {exc.message}") from None
        try:
            return models.model_config(step.key, step.version)
        except InferdError:
            pass
        if not any(entry["name"] == step.model for entry in models.repository_index()):
            why = "it is not in the model repository"
        elif step.version:
            why = f"version {step.version} is not loaded"
        else:
            why = "it is not loaded (it failed to load, or was unloaded)"
        raise self._fail(f"{step.label} calls a model that is not available: {why}")

    def _check_mapping(self, step: Step, config: ModelConfig, tensors: dict[str, _Tensor]) -> None:
        batching = config.max_batch_size > 0
        model_inputs = {t.name: t for t in config.input}
        model_outputs = {t.name: t for t in config.output}
        source = f"{step.label}"
        mapped = {name for name, _ in step.inputs}
        for name, tensor in step.inputs:
            spec = model_inputs.get(name)
            if spec is None:
                raise self._fail(
                    f"{step.label} maps ensemble tensor '{tensor}' to input '{name}', which model "
                    f"'{step.model}' does not have; its inputs: {', '.join(model_inputs) or 'none'}"
                )
            dims = tuple(spec.reshape.shape) if spec.HasField("reshape") else tuple(spec.dims)
            self._agree(tensors, tensor, _tensor(spec, dims, batching, f"{source} input '{name}'"))
        for name, spec in model_inputs.items():
            if name not in mapped and not spec.optional:
                raise self._fail(f"input '{name}' of {step.label} is not mapped from any ensemble tensor")
        for name, tensor in step.outputs:
            spec = model_outputs.get(name)
            if spec is None:
                raise self._fail(
                    f"{step.label} maps output '{name}' to ensemble tensor '{tensor}', but model "
                    f"'{step.model}' has no such output; its outputs: {', '.join(model_outputs) or 'none'}"
                )
            self._agree(tensors, tensor, _tensor(spec, tuple(spec.dims), batching, f"{source} output '{name}'"))

    def _agree(self, tensors: dict[str, _Tensor], name: str, seen: _Tensor) -> None:
        """Datatype and shape of an ensemble tensor must agree between every user of it."""
        known = tensors.get(name)
        if known is None:
            tensors[name] = seen
            return
        if known.datatype != seen.datatype:
            raise self._fail(
                f"ensemble tensor '{name}' has inconsistent datatypes: {known.datatype} for "
                f"{known.source}, {seen.datatype} for {seen.source}"
            )
        if not (_dims_agree(known.dims, seen.dims) or _dims_agree(known.full_dims, seen.full_dims)):
            raise self._fail(
                f"ensemble tensor '{name}' has inconsistent shapes: {list(known.full_dims)} for "
                f"{known.source}, {list(seen.full_dims)} for {seen.source}"
            )

    def _check_decoupled(self) -> None:
        """Triton's rule: a step's inputs (and the ensemble's outputs) must all descend from the
        responses of the same decoupled step, or from none."""
        origin: dict[str, int] = dict.fromkeys(self.inputs, -1)
        downstream: dict[int, set[int]] = {}
        for step in self.steps:  # run order
            origins = {origin.get(t, -1) for t in step.reads}
            if len(origins) > 1:
                raise self._fail(f"{step.label} receives inputs that come from different decoupled steps")
            came_from = origins.pop() if origins else -1
            if came_from >= 0:
                downstream.setdefault(came_from, set()).add(step.index)
                for children in downstream.values():  # transitively downstream
                    if came_from in children:
                        children.add(step.index)
            produced = step.index if step.decoupled else came_from
            for _, tensor in step.outputs:
                origin[tensor] = produced
        outputs = {origin.get(t, -1) for t in self.outputs}
        if len(outputs) > 1:
            raise self._fail("its outputs come from different decoupled steps")
        self.output_origin = outputs.pop() if outputs else -1
        self.downstream = {k: frozenset(v) for k, v in downstream.items()}


def _tensor(spec: object, dims: tuple[int, ...], batching: bool, source: str) -> _Tensor:
    field = spec.DESCRIPTOR.fields_by_name["data_type"]  # type: ignore[attr-defined]
    datatype = config_to_wire(field.enum_type.values_by_number[spec.data_type].name)  # type: ignore[attr-defined]
    return _Tensor(datatype, dims, ((-1,) if batching else ()) + dims, source)


def _dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))
