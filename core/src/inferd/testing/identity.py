"""An "identity" backend for tests: each output is the input of the same index, unchanged.

Pass :data:`identity_plugin` to an in-process server; a model uses it with ``backend: "identity"``
and declares its inputs and outputs in pairs (``INPUT0``/``OUTPUT0``...: same datatype and dims)::

    server = inferd_server(repo, plugins=[identity_plugin])

It batches (an :class:`~inferd.engine.array_instance.ArrayInstance`), serves every datatype including BYTES,
and needs no model file, only a version directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.contracts.backend import Backend, Instance, InstanceSpec, Model, ModelLoadContext
from inferd.contracts.errors import ConfigError
from inferd.contracts.hookspecs import BackendRegister, hookimpl
from inferd.engine.array_instance import ArrayInstance

if TYPE_CHECKING:
    from inferd.config import ModelConfig

BACKEND_NAME = "identity"


def identity_pairs(config: ModelConfig) -> list[tuple[str, str]]:
    """``(input name, output name)`` by index; raises ConfigError when the two sides disagree."""
    model = config.name
    if len(config.input) != len(config.output):
        raise ConfigError(
            f"identity model '{model}' declares {len(config.input)} inputs and {len(config.output)} "
            f"outputs; it needs one output per input, in the same order"
        )
    pairs = []
    for index, (inp, out) in enumerate(zip(config.input, config.output, strict=True)):
        if inp.data_type != out.data_type or list(inp.dims) != list(out.dims):
            raise ConfigError(
                f"identity model '{model}': output {index} '{out.name}' must have the datatype and dims "
                f"of input {index} '{inp.name}' (input: {inp.data_type} {list(inp.dims)}, "
                f"output: {out.data_type} {list(out.dims)})"
            )
        pairs.append((inp.name, out.name))
    return pairs


class IdentityInstance(ArrayInstance):
    """Returns its inputs under the paired output names (no copy)."""

    def __init__(self, context: ModelLoadContext, pairs: list[tuple[str, str]]) -> None:
        super().__init__(context.name, context.version, context.config.max_batch_size)
        self.pairs = pairs

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return {out: inputs[inp] for inp, out in self.pairs if inp in inputs}


class IdentityModel(Model):
    """The pairs of one model version; every instance shares them."""

    def __init__(self, context: ModelLoadContext) -> None:
        self.context = context
        self.pairs = identity_pairs(context.config)

    def create_instance(self, spec: InstanceSpec) -> Instance:
        return IdentityInstance(self.context, self.pairs)


class IdentityBackend(Backend):
    """Loads identity models: nothing to read from disk."""

    name = BACKEND_NAME
    #: Never needed on disk; named so that a backend-less model is not taken for an identity one.
    default_model_filename = "model.identity"

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Mirror the inputs as ``OUTPUT<n>`` when the config declares inputs but no outputs."""
        if config.input and not config.output:
            for index, inp in enumerate(config.input):
                out = config.output.add(name=f"OUTPUT{index}", data_type=inp.data_type)
                out.dims.extend(inp.dims)

    def load_model(self, context: ModelLoadContext) -> Model:
        return IdentityModel(context)


class IdentityPlugin:
    """A plugin object registering :class:`IdentityBackend` (under another name if given)."""

    def __init__(self, backend_name: str = BACKEND_NAME) -> None:
        self.backend_name = backend_name
        self.__name__ = f"inferd-testing-{backend_name}"

    @hookimpl
    def inferd_register_backends(self, register: BackendRegister) -> None:
        name = self.backend_name

        def factory() -> Backend:
            backend = IdentityBackend()
            backend.name = name
            return backend

        register(name, factory)

    def __repr__(self) -> str:
        return f"IdentityPlugin({self.backend_name!r})"


#: The plugin object to pass to ``inferd_server(repo, plugins=[identity_plugin])``.
identity_plugin: Any = IdentityPlugin()


def identity_config(name: str, tensors: list[tuple[str, list[int]]], max_batch_size: int = 8, extra: str = "") -> str:
    """A config.pbtxt for an identity model: ``tensors`` are ``(TYPE_xxx, dims)`` per pair."""
    inputs = ", ".join(
        f'{{ name: "INPUT{i}" data_type: {dt} dims: {list(dims)} }}' for i, (dt, dims) in enumerate(tensors)
    )
    outputs = ", ".join(
        f'{{ name: "OUTPUT{i}" data_type: {dt} dims: {list(dims)} }}' for i, (dt, dims) in enumerate(tensors)
    )
    return (
        f'name: "{name}"\nbackend: "{BACKEND_NAME}"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {inputs} ]\noutput [ {outputs} ]\n{extra}"
    )
