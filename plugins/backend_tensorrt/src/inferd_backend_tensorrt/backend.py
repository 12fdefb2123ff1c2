"""The "tensorrt" backend: serialized TensorRT engines (``model.plan``) on NVIDIA GPUs.

``TensorRTBackend`` completes configs from the engine's I/O tensors; ``TensorRTModel`` reads the
plan once and deserializes engines per GPU (shared by the instances on that GPU when the engine
has static shapes; one per instance when it has dynamic shapes, as Triton does); each
:class:`~inferd_backend_tensorrt.instance.TensorRTInstance` owns its execution contexts (one per
optimization profile it may use), a CUDA stream and its buffers.

TensorRT and the CUDA bindings are imported when a model first needs them, with a clear error
where they (or a GPU) are missing.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.api import (
    Backend,
    InferdError,
    Instance,
    InstanceSpec,
    InvalidArgument,
    Model,
    ModelLoadContext,
    NotFound,
    platform_for,
)
from inferd_backend_tensorrt import cuda, runtime
from inferd_backend_tensorrt.autocomplete import autocomplete, check_config
from inferd_backend_tensorrt.engine import EngineInfo, describe, parse_profiles
from inferd_backend_tensorrt.instance import TensorRTInstance
from inferd_backend_tensorrt.options import parse_options

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger("inferd.contracts.backend.tensorrt")

DEFAULT_FILENAME = "model.plan"


def plan_filename(config: ModelConfig, device: int) -> str:
    """``cc_model_filenames[<compute capability>]`` when the config maps the GPU's, else the default."""
    if config.cc_model_filenames:
        cc = cuda.compute_capability(device)
        if cc in config.cc_model_filenames:
            return str(config.cc_model_filenames[cc])
    return config.default_model_filename or DEFAULT_FILENAME


def read_plan(path: Path, model: str) -> bytes:
    if not path.is_file():
        raise NotFound(f"model '{model}': TensorRT plan '{path}' does not exist")
    return path.read_bytes()


class TensorRTBackend(Backend):
    """Loads ``model.plan`` files (platform ``tensorrt_plan``)."""

    name = "tensorrt"
    default_model_filename = DEFAULT_FILENAME

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill inputs, outputs, max_batch_size and GPU instance groups from the engine."""
        model = config.name or model_dir.name
        if not config.backend and not config.platform:  # found by its model.plan: say so, as Triton does
            config.backend, config.platform = self.name, platform_for(self.name)
        trt, count = runtime.require(model)
        gpus = list(range(count))
        if version_dir is None:  # complete the instance groups only
            from inferd_backend_tensorrt.autocomplete import complete_instance_groups

            complete_instance_groups(config, gpus)
            return
        device = _first_gpu(config, gpus)
        cuda.set_device(device)
        path = version_dir / plan_filename(config, device)
        engine = runtime.deserialize(trt, runtime.new_runtime(trt), read_plan(path, model), model, path)
        autocomplete(config, describe(engine), gpus)
        del engine

    def load_model(self, context: ModelLoadContext) -> Model:
        trt, _ = runtime.require(context.name)
        return TensorRTModel(trt, context)


def _first_gpu(config: ModelConfig, gpus: list[int]) -> int:
    for group in config.instance_group:
        if group.gpus:
            return int(group.gpus[0])
    return gpus[0]


class TensorRTModel(Model):
    """A plan read once; runtimes and (static-shape) engines shared per GPU."""

    def __init__(self, trt: Any, context: ModelLoadContext) -> None:
        self.trt = trt
        self.context = context
        self.config = context.config
        self.options = parse_options(self.config, context.name)
        self._plans: dict[str, bytes] = {}
        self._runtimes: dict[int, Any] = {}
        self._engines: dict[int, Any] = {}
        #: A dynamic-shape engine deserialized for the config check, handed to the first instance.
        self._spare: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.info: EngineInfo | None = None
        self.profiles: list[int] = []
        # Check the config against the engine once, on the first GPU the model uses.
        device = _first_gpu(self.config, [0])
        engine = self.engine_for(device, shared_only=False)
        self.info = describe(engine)
        self.profiles = check_config(self.config, self.info)
        (self._spare if self.info.dynamic else self._engines)[device] = engine

    def _plan(self, device: int) -> tuple[bytes, Path]:
        filename = plan_filename(self.config, device)
        path = self.context.version_dir / filename
        if filename not in self._plans:
            self._plans[filename] = read_plan(path, self.context.name)
        return self._plans[filename], path

    def engine_for(self, device: int, shared_only: bool = True) -> Any:
        """An engine on ``device``: the shared one for static shapes, else a new one."""
        with self._lock:
            cuda.set_device(device)
            if shared_only and device in self._engines:
                return self._engines[device]
            if shared_only and device in self._spare:
                return self._spare.pop(device)
            trt_runtime = self._runtimes.get(device)
            if trt_runtime is None:
                trt_runtime = self._runtimes[device] = runtime.new_runtime(self.trt)
            plan, path = self._plan(device)
            engine = runtime.deserialize(self.trt, trt_runtime, plan, self.context.name, path)
            if shared_only and self.info is not None and not self.info.dynamic:
                self._engines[device] = engine
            return engine

    def create_instance(self, spec: InstanceSpec) -> Instance:
        if spec.kind != "KIND_GPU":
            raise InvalidArgument(
                f"model '{self.context.name}': instance '{spec.name}' has kind {spec.kind}; TensorRT engines run "
                f"only on GPUs (use kind: KIND_GPU)"
            )
        assert self.info is not None
        group = next((g for g in self.config.instance_group if g.name == spec.group_name), None)
        profiles = parse_profiles(list(group.profile), self.info.num_profiles, self.context.name) if group else [0]
        engine = self.engine_for(spec.device_id)
        try:
            return TensorRTInstance(self.context, self.options, self.info, engine, spec, profiles)
        except InferdError:
            raise
        except Exception as exc:
            raise InvalidArgument(
                f"model '{self.context.name}': instance '{spec.name}' on GPU {spec.device_id} failed to start: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def unload(self) -> None:
        with self._lock:
            self._engines.clear()
            self._spare.clear()
            self._runtimes.clear()
            self._plans.clear()
