"""The onnxruntime backend: completes configs from the model's graph, loads a model version,
and gives each instance its own ``InferenceSession``
(:class:`~inferd_backend_onnx.instance.OnnxInstance`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from inferd.api import Backend, ConfigError, InstanceSpec, InvalidArgument, Model, ModelLoadContext
from inferd_backend_onnx import options, session, signature
from inferd_backend_onnx.instance import OnnxInstance
from inferd_backend_onnx.signature import graph_tensors

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger(__name__)


class OnnxBackend(Backend):
    """Triton's ``onnxruntime`` backend (platform ``onnxruntime_onnx``)."""

    name = "onnxruntime"
    default_model_filename = "model.onnx"
    default_cpu_instance_count = 2

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        """``settings``: the ``--backend-config`` ones (:data:`options.BACKEND_SETTINGS`). With
        ``enable-global-threadpool`` the process's onnxruntime thread pools are sized here, before
        any session exists."""
        self.options = options.backend_options(settings or {})
        #: Triton's ``--backend-config=onnxruntime,default-max-batch-size`` (default 4).
        self.default_max_batch_size = self.options.default_max_batch_size
        if self.options.global_threadpool:
            ort_state.set_global_thread_pool_sizes(self.options.intra_op_threads, self.options.inter_op_threads)
            log.info(
                "onnxruntime global thread pools: intra_op_thread_count=%s, inter_op_thread_count=%s",
                self.options.intra_op_threads or "default",
                self.options.inter_op_threads or "default",
            )

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill inputs, outputs, max_batch_size and dynamic_batching from the model's graph."""
        if not config.backend and not config.platform:
            config.backend = self.name
        model = config.name or model_dir.name
        if (len(config.input) + len(config.batch_input)) > 0 and len(config.output) > 0:
            log.info("skipping model configuration auto-complete for '%s': inputs and outputs already specified", model)
            return
        if version_dir is None:
            return  # no version directory: the lifecycle reports it
        path = session.resolve_model_path(version_dir / (config.default_model_filename or self.default_model_filename))
        if not path.is_file():
            raise ConfigError(
                f"model '{model}': cannot auto-complete the configuration: unable to find '{path}' "
                f"(the config lists no inputs or outputs, so they are read from the model file)"
            )
        probe = session.open_session(
            path, model, session.probe_options(self.options.global_threadpool), [(options.CPU, {})]
        )
        inputs, outputs = graph_tensors(probe.get_inputs()), graph_tensors(probe.get_outputs())
        signature.autocomplete(config, model, inputs, outputs, self.default_max_batch_size)

    def load_model(self, context: ModelLoadContext) -> Model:
        return OnnxModel(context, self.options.global_threadpool)


def _instance_count(config: ModelConfig) -> int:
    return sum(max(1, g.count) * max(1, len(g.gpus) if g.kind == g.KIND_GPU else 1) for g in config.instance_group)


class OnnxModel(Model):
    """A loaded ONNX model version: the file, parsed options; sessions are made per instance."""

    def __init__(self, context: ModelLoadContext, shared_threads: bool = False) -> None:
        self.context = context
        self.name = context.name
        self.version = context.version
        self.config = context.config
        self.path = session.resolve_model_path(context.model_path)
        if not self.path.is_file():
            raise InvalidArgument(f"unable to find '{self.path}' for model '{self.name}' version {self.version}")
        instances = _instance_count(self.config) if context.instances is None else context.instances
        self.settings = options.session_settings(self.config, self.name, instances, shared_threads, context.cores)
        for kind in ("KIND_CPU", "KIND_GPU"):  # unknown accelerators fail the load, not the first request
            options.providers_for(self.config, self.name, kind, 0, self.settings.cuda_options)
        self.run_options = session.run_options(self.settings)
        self._checked = False

    def create_instance(self, spec: InstanceSpec) -> OnnxInstance:
        requested = options.providers_for(self.config, self.name, spec.kind, spec.device_id, self.settings.cuda_options)
        chosen = self._available(requested, spec)
        so = session.session_options(self.settings, self.name)
        opened = session.open_session(self.path, self.name, so, chosen)
        self._report_providers(spec, chosen, opened.get_providers())
        if not self._checked:  # create_instance runs once per instance; the graph is the same for all
            inputs, outputs = graph_tensors(opened.get_inputs()), graph_tensors(opened.get_outputs())
            overridable = graph_tensors(opened.get_overridable_initializers())
            signature.check_config(self.config, self.name, inputs, outputs, overridable)
            self._checked = True
        return OnnxInstance(self.context, opened, self.run_options)

    def _available(self, requested: list[options.Provider], spec: InstanceSpec) -> list[options.Provider]:
        available = set(ort.get_available_providers())
        missing = [name for name, _ in requested if name not in available]
        if missing:
            log.warning(
                "model '%s' instance '%s': execution provider(s) %s not available in this onnxruntime build "
                "(available: %s); falling back to the next one (CPUExecutionProvider last)",
                self.name,
                spec.name,
                ", ".join(missing),
                ", ".join(sorted(available)),
            )
        return [p for p in requested if p[0] in available] or [(options.CPU, {})]

    def _report_providers(self, spec: InstanceSpec, chosen: list[options.Provider], active: list[str]) -> None:
        failed = [name for name, _ in chosen if name not in active]
        if failed:
            log.warning(
                "model '%s' instance '%s': onnxruntime could not start %s (see its message above); "
                "the session runs on %s",
                self.name,
                spec.name,
                ", ".join(failed),
                ", ".join(active),
            )
        log.info(
            "model '%s' version %d instance '%s' (%s): onnxruntime %s session on %s; intra_op_threads=%s",
            self.name,
            self.version,
            spec.name,
            spec.kind,
            ort.__version__,
            options.describe([p for p in chosen if p[0] in active]),
            self.settings.intra_op_threads or "default",
        )
