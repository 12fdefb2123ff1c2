"""A minimal backend plugin: backend "scale" multiplies each input by a configured factor.

A model uses it with ``backend: "scale"`` and a ``factor`` parameter; input ``INPUT<n>`` gives
output ``OUTPUT<n>``. It needs no model file, only a version directory::

    backend: "scale"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    parameters [ { key: "factor" value: { string_value: "3" } } ]

The outputs may be left out: ``autocomplete_config`` mirrors the inputs. In a real plugin the
hook lives in ``hooks.py`` (which imports no framework), the Backend and Model in ``backend.py``, the
Instance in ``instance.py`` and the parameters' parsing in ``options.py`` (docs/writing-a-backend.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from inferd.api import (
    ArrayInstance,
    Backend,
    BackendRegister,
    ConfigError,
    InstanceSpec,
    Model,
    ModelLoadContext,
    hookimpl,
)

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major refuses it.
INFERD_API = (1, 0)


class ScaleInstance(ArrayInstance):
    """``ArrayInstance`` batches requests for us; ``run`` sees one dict of arrays."""

    def __init__(self, context: ModelLoadContext, factor: float) -> None:
        super().__init__(context.name, context.version, context.config.max_batch_size)
        self.factor = factor
        self.names = [(i.name, o.name) for i, o in zip(context.config.input, context.config.output, strict=True)]

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        return {out: inputs[inp] * inputs[inp].dtype.type(self.factor) for inp, out in self.names}


class ScaleModel(Model):
    """One loaded version: reads the factor once; every instance shares it."""

    def __init__(self, context: ModelLoadContext) -> None:
        self.context = context
        config = context.config
        if len(config.input) != len(config.output):
            raise ConfigError(
                f"model '{context.name}': the scale backend needs one output per input, "
                f"got {len(config.input)} inputs and {len(config.output)} outputs"
            )
        param = config.parameters.get("factor")
        try:
            self.factor = float(param.string_value) if param is not None else 1.0
        except ValueError:
            raise ConfigError(
                f"model '{context.name}': parameter 'factor' must be a number, got '{param.string_value}'"
            ) from None

    def create_instance(self, spec: InstanceSpec) -> ScaleInstance:
        return ScaleInstance(self.context, self.factor)


class ScaleBackend(Backend):
    name = "scale"
    default_model_filename = "model.scale"  # never read; a backend-less model is not taken for ours

    def autocomplete_config(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
        if config.input and not config.output:
            for index, inp in enumerate(config.input):
                config.output.add(name=f"OUTPUT{index}", data_type=inp.data_type, dims=list(inp.dims))

    def load_model(self, context: ModelLoadContext) -> Model:
        return ScaleModel(context)


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    register("scale", ScaleBackend)  # the factory takes no argument; called when a model needs it
