"""The "{{ cookiecutter.backend_name }}" backend: Backend -> Model -> Instance.

This template echoes: output ``n`` is input ``n``, unchanged. Each method says what a real
framework puts there. The only module that may import your framework is this one (or modules it
imports), and only at module level here, because ``hooks.py`` imports this module lazily.

Lifecycle, for each model version:

1. ``Backend.autocomplete_config`` fills what config.pbtxt leaves out (unless auto-complete is off).
2. ``Backend.load_model`` loads the version's files once -> a ``Model``.
3. ``Model.create_instance`` runs once per instance of each ``instance_group`` entry.
4. ``execute`` (here ``ArrayInstance.run``) runs batches: a ``SyncInstance``'s on the instance's own
   thread, an ``AsyncInstance``'s (``async def execute``) on the server's event loop.
5. On unload or reload: ``close`` for each instance, then ``Model.unload``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from inferd.api import ArrayInstance, Backend, ConfigError, InstanceSpec, Model, ModelLoadContext, NotFound

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger("inferd.contracts.backend.{{ cookiecutter.backend_name }}")


class {{ cookiecutter.class_prefix }}Backend(Backend):
    """One object per server, made by the factory in hooks.py the first time a model needs it.

    Keep server-wide state here (a framework runtime, a device list); nothing per model.
    """

    #: What config.pbtxt's ``backend:`` field says.
    name = "{{ cookiecutter.backend_name }}"
    #: The file (or directory) loaded from ``<model>/<version>/`` when the config names none. A
    #: model without backend or platform in its config is given to the backend whose file exists.
    default_model_filename = "{{ cookiecutter.model_filename }}"
    #: Instances of a KIND_CPU group that gives no ``count``.
    default_cpu_instance_count = 1

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill, in place, what the config leaves out, from the model files.

        A framework reads its model's signature here: input and output names, datatypes, dims,
        whether the first dimension is a batch (-> ``max_batch_size``). Only fill fields that are
        empty; never override what the user wrote. Raise ``ConfigError`` when the files and the
        config disagree. ``version_dir`` is the highest version directory (None if there is none).

        Echo: outputs mirror the inputs (``OUTPUT<n>``) when the config declares none.
        """
        if config.input and not config.output:
            for index, tensor in enumerate(config.input):
                output = config.output.add(name=f"OUTPUT{index}", data_type=tensor.data_type)
                output.dims.extend(tensor.dims)

    def load_model(self, context: ModelLoadContext) -> Model:
        """Load one version of a model (called off the event loop; may take seconds).

        Read ``context.model_path`` (``<model>/<version>/<default_model_filename>``) with the
        framework: weights, a graph, a compiled engine. ``context.config`` is the completed,
        validated config (a protobuf ``ModelConfig``). Raise an inferd error (``NotFound``,
        ``InvalidArgument``...) naming the model and the file when it fails; the message ends up in
        the repository index and in the load request's answer.
        """
        path = context.model_path
        if not path.exists():
            raise NotFound(f"model '{context.name}': model file '{path}' does not exist")
        return {{ cookiecutter.class_prefix }}Model(context, path.read_text(errors="replace"))


class {{ cookiecutter.class_prefix }}Model(Model):
    """A loaded model version: what every instance shares (weights, parsed config)."""

    def __init__(self, context: ModelLoadContext, artifact: str) -> None:
        self.context = context
        self.artifact = artifact  # a real backend keeps its loaded weights / graph here
        self.pairs = _pairs(context.config)

    def create_instance(self, spec: InstanceSpec) -> ArrayInstance:
        """Create one instance (called once per instance, off the event loop).

        ``spec.kind`` is ``KIND_CPU`` or ``KIND_GPU`` (then ``spec.device_id`` is the GPU);
        ``spec.name`` is Triton's instance name. Create the per-instance state here: a session,
        an execution context, a CUDA stream. Refuse kinds the framework cannot run.
        """
        return {{ cookiecutter.class_prefix }}Instance(self, spec)

    def unload(self) -> None:
        """Release what ``load_model`` took, after every instance is closed."""
        self.artifact = ""


class {{ cookiecutter.class_prefix }}Instance(ArrayInstance):
    """One execution context. ``ArrayInstance`` concatenates a batch of requests along the batch
    dimension, calls :meth:`run` once and splits the outputs back per request.

    ``ArrayInstance`` is a ``SyncInstance``: its ``execute`` computes on the instance's own thread.
    A framework that is not "arrays in, arrays out" (streaming, decoupled models) subclasses
    ``inferd.api.SyncInstance`` instead and implements ``execute(requests) -> responses``; one that
    only hands requests to work running elsewhere (an asyncio engine, another process) subclasses
    ``inferd.api.AsyncInstance`` and implements ``async def execute(requests) -> responses``, run
    on the server's event loop (it must never block it).
    """

    def __init__(self, model: {{ cookiecutter.class_prefix }}Model, spec: InstanceSpec) -> None:
        context = model.context
        super().__init__(context.name, context.version, context.config.max_batch_size)
        self.pairs = model.pairs
        self.spec = spec

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """Compute outputs by name from inputs by name (numpy arrays; BYTES are object arrays).

        Called on this instance's own thread, never concurrently with itself. Inputs have the
        batch dimension when the model batches. Return every output; the requested ones are picked
        for each request. Raise ``InvalidArgument`` for bad data the config could not catch.

        Echo: each output is the input of the same index (no copy).
        """
        return {out: inputs[inp] for inp, out in self.pairs if inp in inputs}

    def close(self) -> None:
        """Release the instance's resources (session, stream, buffers). Called once, last."""


def _pairs(config: ModelConfig) -> list[tuple[str, str]]:
    """(input, output) names by index; outputs must match their inputs' datatype and dims."""
    if len(config.input) != len(config.output):
        raise ConfigError(
            f"model '{config.name}': the {{ cookiecutter.backend_name }} backend needs one output per input, "
            f"got {len(config.input)} inputs and {len(config.output)} outputs"
        )
    for index, (inp, out) in enumerate(zip(config.input, config.output, strict=True)):
        if inp.data_type != out.data_type or list(inp.dims) != list(out.dims):
            raise ConfigError(
                f"model '{config.name}': output {index} '{out.name}' must have the datatype and dims of "
                f"input {index} '{inp.name}'"
            )
    return [(inp.name, out.name) for inp, out in zip(config.input, config.output, strict=True)]
