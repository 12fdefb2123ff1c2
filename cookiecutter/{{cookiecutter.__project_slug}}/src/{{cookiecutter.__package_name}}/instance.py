"""One instance of the "{{ cookiecutter.backend_name }}" backend: executes batches of requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from inferd.api import ArrayInstance

if TYPE_CHECKING:
    from inferd.api import InstanceSpec, ModelLoadContext

    from {{ cookiecutter.__package_name }}.options import {{ cookiecutter.__class_prefix }}Options


class {{ cookiecutter.__class_prefix }}Instance(ArrayInstance):
    """One execution context. ``ArrayInstance`` concatenates a batch of requests along the batch
    dimension, calls :meth:`run` once and splits the outputs back per request.

    ``ArrayInstance`` is a ``SyncInstance``: its ``execute`` computes on the instance's own thread.
    A framework that is not "arrays in, arrays out" (streaming, decoupled models) subclasses
    ``inferd.api.SyncInstance`` instead and implements ``execute(requests) -> responses``; one that
    only hands requests to work running elsewhere (an asyncio engine, another process) subclasses
    ``inferd.api.AsyncInstance`` and implements ``async def execute(requests) -> responses``, run
    on the server's event loop (it must never block it).
    """

    def __init__(
        self, context: ModelLoadContext, options: {{ cookiecutter.__class_prefix }}Options, spec: InstanceSpec
    ) -> None:
        super().__init__(context.name, context.version, context.config.max_batch_size)
        self.pairs = options.pairs
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
