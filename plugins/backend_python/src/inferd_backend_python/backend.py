"""The "python" backend: Triton ``model.py`` files run in the server process.

``PythonBackend`` imports ``<model>/<version>/model.py``; each instance is one ``TritonPythonModel``
object, initialised with Triton's ``args`` dict. ``execute`` receives ``pb_utils`` views of inferd's
requests (input arrays are not copied) and its responses are turned back into inferd responses.
An isolated model (``EXECUTION_MODE: process``) runs each instance in a stub process of its own
instead (:mod:`~inferd_backend_python.process_model`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.api import SOURCES, Backend, Instance, InstanceSpec, Model, ModelLoadContext, NotFound
from inferd_backend_python import env as environments
from inferd_backend_python.instance import (
    BLOCKED,
    PythonInstance,
    execute_warn_secs,
    inline_reason,
    instance_args,
    run_auto_complete,
    start_model_object,
)
from inferd_backend_python.isolation import Isolation
from inferd_backend_python.loader import check_model_class, forget_package, import_model_file
from inferd_backend_python.pb_metrics import FAMILIES
from inferd_backend_python.pb_request import ModelBinding, bind
from inferd_backend_python.process_settings import isolation_settings
from inferd_backend_python.readiness import Probe, first_problem, on_thread

_log = logging.getLogger("inferd.contracts.backend.python")
_DEFAULT_FILENAME = "model.py"
#: How long an environment unpacked for ``auto_complete_config`` stays for the load that follows
#: (which then holds it): a packed CUDA environment takes tens of seconds to unpack.
_AUTOCOMPLETE_HOLD_S = 30.0


class PythonBackend(Backend):
    """Loads Triton Python models (``model.py`` defining ``TritonPythonModel``)."""

    name = "python"
    default_model_filename = _DEFAULT_FILENAME

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        #: The bounds of an unpacked EXECUTION_ENV_PATH archive (``--backend-config=python,...``).
        self.env_limits = environments.limits(settings or {})
        #: The threads and statistics its isolated models share (:mod:`inferd_backend_python.isolation`).
        self.isolation = Isolation()
        SOURCES.add(FAMILIES)  # the models' pb_utils.MetricFamily objects, on /metrics

    def autocomplete_config(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
        """Run the model's ``TritonPythonModel.auto_complete_config`` (if any) on ``config``."""
        filename = config.default_model_filename or _DEFAULT_FILENAME
        if version_dir is None:
            version_dir = _highest_version_dir(model_dir, filename)
            if version_dir is None:
                return
        path = version_dir / filename
        if not path.is_file():
            return  # load_model reports the missing file
        name = config.name or model_dir.name
        if self._isolated_autocomplete(config, model_dir, path, name, version_dir.name):
            return
        module = import_model_file(name, version_dir.name, path, model_dir)
        try:
            hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
            if hook is not None:
                _complete(config, hook, name, path, model_dir)
        finally:
            forget_package(module.__name__.rpartition(".")[0])

    def load_model(self, context: ModelLoadContext) -> Model:
        filename = context.config.default_model_filename or _DEFAULT_FILENAME
        path = context.version_dir / filename
        settings = isolation_settings(context.config, context.model_dir, context.name, self.env_limits)
        if settings is not None:
            if not path.is_file():
                raise NotFound(
                    f"model '{context.name}' version {context.version}: Python model file not found in '{path}'"
                )
            from inferd_backend_python.process_model import ProcessModel

            return ProcessModel(context, path, settings, self.isolation)
        module = import_model_file(context.name, context.version, path, context.model_dir)
        return PythonModel(context, module, path)

    def _isolated_autocomplete(self, config: Any, model_dir: Path, path: Path, name: str, version: str) -> bool:
        """For an isolated model, run ``auto_complete_config`` in a stub (the model may import packages
        only its environment has). False for an in-process model."""
        settings = isolation_settings(config, model_dir, name, self.env_limits)
        if settings is None:
            return False
        if "auto_complete_config" not in path.read_text(errors="replace"):
            return True  # no hook to run: spare a process start
        from inferd.api import config_from_json, config_to_json
        from inferd_backend_python.launcher import Launcher
        from inferd_backend_python.stub_autocomplete import autocomplete

        as_json = config_to_json(config)
        if not as_json.get("name"):
            as_json["name"] = name
        launcher = Launcher.for_settings(settings, f"model '{name}'", self.isolation.spawner)
        try:
            completed = autocomplete(launcher, self.isolation, as_json, name, path, model_dir, version)
        finally:
            launcher.release(_AUTOCOMPLETE_HOLD_S)
        if completed is not None:
            config.CopyFrom(config_from_json(completed, f"{path} (auto_complete_config)"))
        return True


def _highest_version_dir(model_dir: Path, filename: str) -> Path | None:
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    with_file = [p for p in versions if (p / filename).is_file()]
    candidates = with_file or versions
    return max(candidates, key=lambda p: int(p.name)) if candidates else None


def _complete(config: Any, hook: Any, name: str, path: Path, model_dir: Path) -> None:
    from inferd.api import config_from_json, config_to_json

    as_json = config_to_json(config)
    if not as_json.get("name"):
        as_json["name"] = name
    bind(ModelBinding(name, "", model_dir, False))
    completed = run_auto_complete(as_json, hook, name, path)
    config.CopyFrom(config_from_json(completed, f"{path} (auto_complete_config)"))


class PythonModel(Model):
    """One loaded version of a Python model: the imported module, shared by its instances."""

    def __init__(self, context: ModelLoadContext, module: ModuleType, path: Path) -> None:
        from inferd.api import config_to_json

        self.name = context.name
        self.version = str(context.version)
        self.path = path
        self._module = module
        self._class = check_model_class(module, f"model '{self.name}'", path)
        decoupled = bool(context.config.model_transaction_policy.decoupled)
        self.binding = ModelBinding(self.name, self.version, context.model_dir, decoupled, context.models)
        FAMILIES.model_loaded(self.binding)
        #: ``sequence_batching { iterative_sequence: true }``: requests may be rescheduled.
        self.iterative = bool(context.config.sequence_batching.iterative_sequence)
        self.warn_after = execute_warn_secs(context.config, self.name)
        #: Why executions never run on the event loop (None: quick ones may).
        self.inline_reason = inline_reason(context.config, self.name, context.model_dir)
        if self.inline_reason is not None:
            _log.debug(
                "model '%s' version %s: execute runs on its instances' threads only: %s",
                self.name,
                self.version,
                self.inline_reason,
            )
        #: One per instance whose model defines ``is_ready``.
        self.probes: list[Probe] = []
        self._args = {
            "model_config": json.dumps(config_to_json(context.config)),
            "model_repository": str(context.model_dir),
            "model_version": self.version,
            "model_name": self.name,
        }

    def create_instance(self, spec: InstanceSpec) -> Instance:
        args = instance_args(self._args, spec)
        model = start_model_object(self._class, args, self.binding, self.path)
        instance = PythonInstance(self.binding, self.iterative, model, spec.name, self.inline_reason is None)
        if instance.has_is_ready:
            label = f"model '{self.name}' instance '{spec.name}'"
            self.probes.append(Probe(label, lambda: on_thread(instance.user_ready)))
        if self.warn_after:
            instance.warn_after = self.warn_after
            BLOCKED.add(instance)
        return instance

    async def check_ready(self) -> str | None:
        """The instances' ``is_ready`` (those that define one): the first that fails, or None."""
        return await first_problem(self.probes)

    def unload(self) -> None:
        FAMILIES.model_unloaded(self.binding)
        forget_package(self._module.__name__.rpartition(".")[0])
