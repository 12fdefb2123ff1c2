"""The "pytorch" backend: Triton's pytorch_backend (platform ``pytorch_libtorch``) on PyTorch.

A version directory holds a TorchScript ``model.pt`` (``torch.jit.script(m).save(path)``) or a
torch.export program ``model.pt2`` (``torch.export.save(torch.export.export(m, args), path)``).
The second is used when ``default_model_filename`` is ``model.pt2``, or when the config names no
file and ``model.pt2`` exists without ``model.pt``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from inferd.api import (
    Backend,
    ConfigError,
    DataType,
    Instance,
    InstanceSpec,
    InvalidArgument,
    MemoryUsage,
    Model,
    ModelLoadContext,
)
from inferd_backend_pytorch.binding import InputPlan, OutputPlan, model_output_names, plan_inputs
from inferd_backend_pytorch.instance import PyTorchInstance
from inferd_backend_pytorch.loading import LoadedModule, load_module
from inferd_backend_pytorch.options import TorchOptions, backend_options, parse_options

log = logging.getLogger("inferd.pytorch")

TORCHSCRIPT_FILENAME = "model.pt"
EXPORTED_FILENAME = "model.pt2"
_TYPE_STRING = DataType.Value("TYPE_STRING")


class PyTorchBackend(Backend):
    """Loads TorchScript and torch.export models; one instance per ``instance_group`` slot."""

    name = "pytorch"
    default_model_filename = TORCHSCRIPT_FILENAME

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        """``settings``: the ``--backend-config`` ones (:data:`BACKEND_SETTINGS`); thread counts
        given there are applied now, before any model, and win over the models' parameters."""
        opts = backend_options(settings or {})
        apply_thread_settings(opts.intra_op_threads, opts.inter_op_threads, "--backend-config=pytorch")

    def autocomplete_config(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
        """Choose ``model.pt2`` when it is the only model file. Inputs and outputs are not filled.

        TorchScript keeps no reliable tensor shapes, so Triton's pytorch backend skips
        auto-complete; inferd does the same and reports missing inputs/outputs at load time.
        """
        if config.default_model_filename or version_dir is None:
            return
        if not (version_dir / TORCHSCRIPT_FILENAME).exists() and (version_dir / EXPORTED_FILENAME).exists():
            config.default_model_filename = EXPORTED_FILENAME

    def load_model(self, context: ModelLoadContext) -> Model:
        config = context.config
        options = parse_options(config, context.name)
        names = model_input_names(config)
        if not names or not config.output:
            raise ConfigError(
                f"model '{context.name}': the pytorch backend cannot auto-complete inputs and outputs "
                f"(TorchScript records no tensor shapes); declare every input and output in config.pbtxt "
                f"(inputs declared: {len(names)}, outputs declared: {len(config.output)})"
            )
        _check_string_dims(context.name, config)
        path = model_file(context)
        apply_thread_settings(options.intra_op_threads, options.inter_op_threads, f"model '{context.name}'")
        return PyTorchModel(context, path, options, names)


def model_input_names(config: Any) -> list[str]:
    """What forward() receives, in Triton's order: config inputs, then sequence controls and states."""
    names = [t.name for t in config.input]
    if config.WhichOneof("scheduling_choice") == "sequence_batching":
        names += [c.name for c in config.sequence_batching.control_input]
        names += [s.input_name for s in config.sequence_batching.state]
    return names


def model_file(context: ModelLoadContext) -> Path:
    """The file to load; falls back to ``model.pt2`` when the default ``model.pt`` is absent."""
    path = context.model_path
    if not path.exists() and path.name == TORCHSCRIPT_FILENAME:
        alternative = path.with_name(EXPORTED_FILENAME)
        if alternative.exists():
            return alternative
    if not path.exists():
        raise InvalidArgument(
            f"model '{context.name}' version {context.version}: model file {path} does not exist "
            f"(expected a TorchScript '{TORCHSCRIPT_FILENAME}' or a torch.export '{EXPORTED_FILENAME}')"
        )
    return path


def _check_string_dims(model: str, config: Any) -> None:
    """Triton passes TYPE_STRING tensors as List[str], so they must be 1-dimensional."""
    batching = 1 if config.max_batch_size > 0 else 0
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            dims = list(t.reshape.shape) if t.HasField("reshape") else list(t.dims)
            if t.data_type == _TYPE_STRING and len(dims) + batching > 1:
                raise ConfigError(
                    f"model '{model}': {kind} '{t.name}' is TYPE_STRING, which PyTorch sees as a List[str]: "
                    f"only 1-dimensional string tensors are supported (batch dimension included)"
                )


class PyTorchModel(Model):
    """One loaded version. Each instance loads its own copy unless ENABLE_WEIGHT_SHARING is set."""

    def __init__(self, context: ModelLoadContext, path: Path, options: TorchOptions, input_names: list[str]) -> None:
        self.context = context
        self.name = context.name
        self.path = path
        self.options = options
        self.input_names = input_names
        self.outputs = OutputPlan(self.name, model_output_names(context.config))
        self._plan: InputPlan | None = None
        self._shared: dict[str, LoadedModule] = {}
        self._lock = threading.Lock()
        #: What its modules took on each CUDA device when they loaded (``memory_usage``).
        self._on_device: Counter[str] = Counter()

    def create_instance(self, spec: InstanceSpec) -> Instance:
        device = instance_device(spec, self.name)
        loaded = self._module(device)
        assert self._plan is not None, "_module binds the inputs"
        return PyTorchInstance(self.context, self.options, self._plan, self.outputs, loaded, device)

    def _module(self, device: torch.device | None) -> LoadedModule:
        key = str(device)
        with self._lock:
            if self.options.weight_sharing and key in self._shared:
                return self._shared[key]
            cuda = device is not None and device.type == "cuda"
            before = torch.cuda.memory_allocated(device) if cuda else 0
            loaded = load_module(self.path, device, f"model '{self.name}' version {self.context.version}")
            if cuda:
                grown = torch.cuda.memory_allocated(device) - before
                self._on_device[str(device)] += max(grown, tensor_bytes(loaded.module, device))
            if self._plan is None:
                self._plan = plan_inputs(self.name, loaded.arguments, self.input_names)
                log.info("model '%s': inputs bound by %s", self.name, self._plan.convention)
            if self.options.weight_sharing:
                self._shared[key] = loaded
            return loaded

    def memory_usage(self) -> MemoryUsage | None:
        """What its instances' modules took on each CUDA device (``torch.cuda.memory_allocated``'s
        growth over each load, at least their parameters and buffers there), counted once at load."""
        return MemoryUsage(device_bytes=dict(self._on_device)) if self._on_device else None

    def unload(self) -> None:
        self._shared.clear()


def tensor_bytes(module: object, device: torch.device | None) -> int:
    """The bytes of ``module``'s parameters and buffers on ``device`` (0 for a module without them)."""
    tensors: list[torch.Tensor] = []
    for method in ("parameters", "buffers"):
        found = getattr(module, method, None)
        if callable(found):
            tensors.extend(found())
    return sum(t.numel() * t.element_size() for t in tensors if t.device == device)


def instance_device(spec: InstanceSpec, model: str) -> torch.device | None:
    """cpu for KIND_CPU, ``cuda:<device_id>`` for KIND_GPU; None (as saved) for KIND_MODEL."""
    if spec.kind == "KIND_MODEL":
        return None
    if spec.kind != "KIND_GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InvalidArgument(
            f"model '{model}' instance '{spec.name}' is KIND_GPU (device {spec.device_id}), but this PyTorch "
            f"({torch.__version__}) sees no CUDA device; use instance_group [{{ kind: KIND_CPU }}] or install "
            f"a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    if spec.device_id >= count:
        raise InvalidArgument(
            f"model '{model}' instance '{spec.name}' asks for GPU {spec.device_id}, but PyTorch sees {count} "
            f"CUDA device(s) (0..{count - 1})"
        )
    return torch.device("cuda", spec.device_id)


_thread_lock = threading.Lock()
_thread_owner: dict[str, tuple[int, str]] = {}


def apply_thread_settings(intra_op_threads: int, inter_op_threads: int, who: str) -> None:
    """INTRA/INTER_OP_THREAD_COUNT are process-wide in PyTorch: the first to set one wins
    (``--backend-config=pytorch,...`` at start-up, else the first model; ``who`` says which)."""
    with _thread_lock:
        for key, count, setter in (
            ("INTRA_OP_THREAD_COUNT", intra_op_threads, torch.set_num_threads),
            ("INTER_OP_THREAD_COUNT", inter_op_threads, torch.set_num_interop_threads),
        ):
            if count <= 0:
                continue
            owner = _thread_owner.get(key)
            if owner is not None:
                if owner[0] != count:
                    log.warning(
                        "%s: %s %d ignored; it is process-wide and %s already set it to %d",
                        who,
                        key,
                        count,
                        owner[1],
                        owner[0],
                    )
                continue
            try:
                setter(count)
            except RuntimeError as exc:  # set_num_interop_threads works once, before any parallel work
                log.warning("%s: %s %d could not be applied: %s", who, key, count, exc)
                continue
            _thread_owner[key] = (count, who)
            log.info("%s: %s set to %d for the whole process", who, key, count)
