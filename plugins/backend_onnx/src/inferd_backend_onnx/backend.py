"""The onnxruntime backend: one ``InferenceSession`` per instance, run on numpy arrays.

The only module of this plugin that imports onnxruntime. ``session.run`` releases the GIL, so
instances of one model compute in parallel on their own threads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from inferd.api import (
    ArrayInstance,
    Backend,
    ConfigError,
    InferdError,
    InstanceSpec,
    InternalError,
    InvalidArgument,
    Model,
    ModelLoadContext,
)
from inferd_backend_onnx import options, signature
from inferd_backend_onnx.signature import TensorInfo, tensor_infos

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger(__name__)

_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ")


def resolve_model_path(path: Path) -> Path:
    """``model.onnx`` may be a directory holding ``model.onnx`` and its external data (as in Triton)."""
    return path / "model.onnx" if path.is_dir() else path


def open_session(path: Path, model: str, so: Any, providers: Sequence[options.Provider]) -> Any:
    """An ``InferenceSession`` on ``path``; loading from the path lets external data beside it load."""
    try:
        return ort.InferenceSession(
            str(path), sess_options=so, providers=[name for name, _ in providers],
            provider_options=[opts for _, opts in providers],
        )  # fmt: skip
    except Exception as exc:  # onnxruntime raises its own classes (InvalidProtobuf, Fail, ...)
        message = _ort_message(exc).replace(f"Load model from {path} failed:", "")
        raise InvalidArgument(f"unable to load model '{model}': onnxruntime cannot load '{path}': {message}") from None


def _ort_message(exc: BaseException) -> str:
    return _ORT_PREFIX.sub("", str(exc)).strip()


def _probe_options(shared_threads: bool) -> Any:
    """Options for a session that only reads the model's inputs and outputs (on the global thread
    pools when they are on: onnxruntime then refuses sessions with their own)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if shared_threads:
        so.use_per_session_threads = False
    else:
        so.intra_op_num_threads = 1
    return so


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
                self.options.intra_op_threads or "default", self.options.inter_op_threads or "default",
            )  # fmt: skip

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
        path = resolve_model_path(version_dir / (config.default_model_filename or self.default_model_filename))
        if not path.is_file():
            raise ConfigError(
                f"model '{model}': cannot auto-complete the configuration: unable to find '{path}' "
                f"(the config lists no inputs or outputs, so they are read from the model file)"
            )
        session = open_session(path, model, _probe_options(self.options.global_threadpool), [(options.CPU, {})])
        signature.autocomplete(
            config, model, tensor_infos(session.get_inputs()), tensor_infos(session.get_outputs()),
            self.default_max_batch_size,
        )  # fmt: skip

    def load_model(self, context: ModelLoadContext) -> Model:
        return OnnxModel(context, self.options.global_threadpool)


def _instance_count(config: ModelConfig) -> int:
    return sum(max(1, g.count) * max(1, len(g.gpus) if g.kind == g.KIND_GPU else 1) for g in config.instance_group)


class OnnxModel(Model):
    """A loaded ONNX model version: the file, parsed options; sessions are made per instance."""

    def __init__(self, context: ModelLoadContext, shared_threads: bool = False) -> None:
        self.name = context.name
        self.version = context.version
        self.config = context.config
        self.path = resolve_model_path(context.model_path)
        if not self.path.is_file():
            raise InvalidArgument(f"unable to find '{self.path}' for model '{self.name}' version {self.version}")
        instances = _instance_count(self.config) if context.instances is None else context.instances
        self.settings = options.session_settings(self.config, self.name, instances, shared_threads, context.cores)
        for kind in ("KIND_CPU", "KIND_GPU"):  # unknown accelerators fail the load, not the first request
            options.providers_for(self.config, self.name, kind, 0, self.settings.cuda_options)
        self.run_options = ort.RunOptions()
        for key, value in self.settings.run_entries.items():
            self.run_options.add_run_config_entry(key, value)
        self._checked = False

    def session_options(self) -> Any:
        """A fresh ``SessionOptions`` from the config (one per session)."""
        s = self.settings
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, s.graph_level)
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if s.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
        so.intra_op_num_threads = s.intra_op_threads
        so.inter_op_num_threads = s.inter_op_threads
        if s.shared_threads:
            so.use_per_session_threads = False
        if s.mem_arena is not None:
            so.enable_cpu_mem_arena = s.mem_arena
        if s.mem_pattern is not None:
            so.enable_mem_pattern = s.mem_pattern
        for key, value in s.session_entries.items():
            try:
                so.add_session_config_entry(key, value)
            except Exception as exc:
                raise ConfigError(f"model '{self.name}': parameter '{key}': {_ort_message(exc)}") from None
        return so

    def create_instance(self, spec: InstanceSpec) -> OnnxInstance:
        requested = options.providers_for(self.config, self.name, spec.kind, spec.device_id, self.settings.cuda_options)
        chosen = self._available(requested, spec)
        session = open_session(self.path, self.name, self.session_options(), chosen)
        self._report_providers(spec, chosen, session.get_providers())
        if not self._checked:  # create_instance runs once per instance; the graph is the same for all
            signature.check_config(
                self.config, self.name, tensor_infos(session.get_inputs()), tensor_infos(session.get_outputs()),
                tensor_infos(session.get_overridable_initializers()),
            )  # fmt: skip
            self._checked = True
        return OnnxInstance(self, session)

    def _available(self, requested: list[options.Provider], spec: InstanceSpec) -> list[options.Provider]:
        available = set(ort.get_available_providers())
        missing = [name for name, _ in requested if name not in available]
        if missing:
            log.warning(
                "model '%s' instance '%s': execution provider(s) %s not available in this onnxruntime build "
                "(available: %s); falling back to the next one (CPUExecutionProvider last)",
                self.name, spec.name, ", ".join(missing), ", ".join(sorted(available)),
            )  # fmt: skip
        return [p for p in requested if p[0] in available] or [(options.CPU, {})]

    def _report_providers(self, spec: InstanceSpec, chosen: list[options.Provider], active: list[str]) -> None:
        failed = [name for name, _ in chosen if name not in active]
        if failed:
            log.warning(
                "model '%s' instance '%s': onnxruntime could not start %s (see its message above); "
                "the session runs on %s",
                self.name, spec.name, ", ".join(failed), ", ".join(active),
            )  # fmt: skip
        log.info(
            "model '%s' version %d instance '%s' (%s): onnxruntime %s session on %s; intra_op_threads=%s",
            self.name, self.version, spec.name, spec.kind, ort.__version__,
            options.describe([p for p in chosen if p[0] in active]), self.settings.intra_op_threads or "default",
        )  # fmt: skip


class OnnxInstance(ArrayInstance):
    """One ``InferenceSession``; converts BYTES tensors and scalar shapes around ``session.run``."""

    #: ``session.run`` waits on nothing of the server's and is thread-safe: a small model's quick
    #: executions run on the event loop (see ``inferd.engine.runner.INLINE_LIMIT_NS``).
    may_run_inline = True

    def __init__(self, model: OnnxModel, session: Any) -> None:
        config = model.config
        super().__init__(model.name, model.version, config.max_batch_size)
        self.session = session
        self.run_options = model.run_options
        self.output_names = signature.run_output_names(config)  # state outputs too
        graph_in = {i.name: i for i in tensor_infos([*session.get_inputs(), *session.get_overridable_initializers()])}
        graph_out = {i.name: i for i in tensor_infos(session.get_outputs())}
        self._string_inputs = frozenset(n for n, i in graph_in.items() if i.is_string)
        self._string_outputs = frozenset(n for n in self.output_names if graph_out[n].is_string)
        # A model scalar that the config declares as [1] (and has no config reshape, which core
        # applies) is reshaped here on the way in, and back to the config's dims on the way out.
        self._input_shapes = {
            t.name: () for t in config.input
            if not t.HasField("reshape") and _is_scalar(graph_in.get(t.name))
        }  # fmt: skip
        self._output_dims = {
            t.name: tuple(t.dims) for t in config.output if t.HasField("reshape") or _is_scalar(graph_out[t.name])
        }
        self._prepare_inputs = bool(self._string_inputs or self._input_shapes)
        self._finish_outputs = bool(self._string_outputs or self._output_dims)

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        feed = self._prepare(inputs) if self._prepare_inputs else dict(inputs)
        try:
            results = self.session.run(self.output_names, feed, self.run_options)
        except Exception as exc:
            raise _map_error(self.model_name, exc) from None
        outputs = dict(zip(self.output_names, results, strict=True))
        if self._finish_outputs:
            self._finish(outputs)
        return outputs

    def _prepare(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = dict(inputs)
        for name in self._string_inputs.intersection(feed):
            feed[name] = _bytes_to_str(self.model_name, name, feed[name])
        for name, shape in self._input_shapes.items():
            if name in feed:
                feed[name] = feed[name].reshape(shape)
        return feed

    def _finish(self, outputs: dict[str, np.ndarray]) -> None:
        for name in self._string_outputs:
            outputs[name] = _str_to_bytes(outputs[name])
        batching = self.max_batch_size > 0
        for name, dims in self._output_dims.items():
            value = outputs[name]
            outputs[name] = value.reshape(((value.shape[0],) if batching and value.ndim else ()) + dims)

    def close(self) -> None:
        self.session = None


def _is_scalar(info: TensorInfo | None) -> bool:
    return info is not None and not info.dims


def _bytes_to_str(model: str, name: str, array: np.ndarray) -> np.ndarray:
    """BYTES items (``bytes``) -> ``str``, which is what onnxruntime's Python API takes for strings."""
    flat = array.reshape(-1)
    out = np.empty(flat.shape, dtype=object)
    try:
        out[:] = [v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v) for v in flat]
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"model '{model}': input '{name}' holds an element that is not valid UTF-8 ({exc.reason} at byte "
            f"{exc.start}); onnxruntime's Python API passes string tensors as text"
        ) from None
    return out.reshape(array.shape)


def _str_to_bytes(array: np.ndarray) -> np.ndarray:
    flat = array.reshape(-1)
    out = np.empty(flat.shape, dtype=object)
    out[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
    return out.reshape(array.shape)


def _map_error(model: str, exc: Exception) -> InferdError:
    """onnxruntime's INVALID_ARGUMENT (wrong rank, type, missing input) is the client's; the rest internal."""
    message = _ort_message(exc)
    if isinstance(exc, (ort_state.InvalidArgument, ValueError, TypeError)):
        return InvalidArgument(f"model '{model}': onnxruntime rejected the request: {message}")
    return InternalError(f"model '{model}': onnxruntime failed to run the request: {type(exc).__name__}: {message}")
