"""The "{{ cookiecutter.backend_name }}" backend: Backend -> Model -> Instance.

This template echoes: output ``n`` is input ``n``, unchanged. Each method says what a real
framework puts there. The package has the shape of inferd's own backends:

- ``hooks.py``: registration, imported at start-up (never your framework);
- ``backend.py`` (this module): the ``Backend`` (config completion, loading) and the loaded ``Model``;
- ``instance.py``: the ``Instance`` that executes batches;
- ``options.py``: the model's parameters, read from its config once, into a frozen dataclass;
- modules named after their job where the framework needs more (a session, an engine...).

Your framework may be imported here and in the modules this one imports (at module level):
``hooks.py`` imports this module only when a model needs the backend.

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
from pathlib import Path
from typing import TYPE_CHECKING

from inferd.api import Backend, InstanceSpec, Model, ModelLoadContext, NotFound

from {{ cookiecutter.__package_name }}.instance import {{ cookiecutter.__class_prefix }}Instance
from {{ cookiecutter.__package_name }}.options import {{ cookiecutter.__class_prefix }}Options, parse_options

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger("inferd.contracts.backend.{{ cookiecutter.backend_name }}")


class {{ cookiecutter.__class_prefix }}Backend(Backend):
    """One object per server, made by the factory in hooks.py the first time a model needs it.

    Keep server-wide state here (a framework runtime, a device list); nothing per model.
    """

    #: What config.pbtxt's ``backend:`` field says.
    name = "{{ cookiecutter.backend_name }}"
    #: The file (or directory) loaded from ``<model>/<version>/`` when the config names none. A
    #: model without backend or platform in its config is given to the backend whose file exists.
    default_model_filename = "{{ cookiecutter.__model_filename }}"
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
        options = parse_options(context.config, context.name)
        path = context.model_path
        if not path.exists():
            raise NotFound(f"model '{context.name}': model file '{path}' does not exist")
        return {{ cookiecutter.__class_prefix }}Model(context, options, path.read_text(errors="replace"))


class {{ cookiecutter.__class_prefix }}Model(Model):
    """A loaded model version: what every instance shares (weights, parsed config)."""

    def __init__(self, context: ModelLoadContext, options: {{ cookiecutter.__class_prefix }}Options, artifact: str) -> None:
        self.context = context
        self.options = options
        self.artifact = artifact  # a real backend keeps its loaded weights / graph here

    def create_instance(self, spec: InstanceSpec) -> {{ cookiecutter.__class_prefix }}Instance:
        """Create one instance (called once per instance, off the event loop).

        ``spec.kind`` is ``KIND_CPU`` or ``KIND_GPU`` (then ``spec.device_id`` is the GPU);
        ``spec.name`` is Triton's instance name. Create the per-instance state here: a session,
        an execution context, a CUDA stream. Refuse kinds the framework cannot run.

        The instance gets what it needs (the load context, the options, what you loaded), not the
        model itself: ``instance.py`` then never imports this module.
        """
        return {{ cookiecutter.__class_prefix }}Instance(self.context, self.options, spec)

    def unload(self) -> None:
        """Release what ``load_model`` took, after every instance is closed."""
        self.artifact = ""
