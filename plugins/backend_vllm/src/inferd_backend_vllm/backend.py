"""The "vllm" backend: Triton's vLLM backend layout (``<version>/model.json``), decoupled.

Config completion imports no vLLM; loading a version starts one engine shared by its instances.
An instance's ``execute`` only hands requests to the engine and returns (it is non-blocking: it
runs on the server's event loop, where the engine's tasks run too); the engine batches them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.api import (
    SOURCES,
    AsyncInstance,
    Backend,
    InferdError,
    InferRequest,
    InferResponse,
    InstanceSpec,
    InvalidArgument,
    Model,
    ModelLoadContext,
    Unavailable,
)
from inferd_backend_vllm.logs import model_logs
from inferd_backend_vllm.metrics import VLLM_METRICS
from inferd_backend_vllm.tensors import INPUTS, OUTPUTS, POOLING_INPUTS, POOLING_OUTPUTS

if TYPE_CHECKING:
    from inferd.api import ModelConfig
    from inferd_backend_vllm.engine import Engine

ENGINE_ARGS_FILENAME = "model.json"
#: Keys of ``model.json`` the OpenAI frontend reads (``vllm serve``'s ``--chat-template`` and
#: ``--tool-call-parser``), kept out of the engine arguments.
FRONTEND_KEYS = ("chat_template", "tool_call_parser")
#: Triton's vLLM backend's LoRA adapters, beside model.json: ``{"name": "/path/to/adapter", ...}``.
MULTI_LORA_FILENAME = "multi_lora.json"


class VllmBackend(Backend):
    """Serves ``<version>/model.json`` (vLLM engine arguments) with vLLM's ``AsyncLLM``."""

    name = "vllm"
    default_model_filename = ENGINE_ARGS_FILENAME

    def __init__(self) -> None:
        SOURCES.add(VLLM_METRICS)  # vLLM's own vllm:* families, on /metrics

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Triton's inputs and outputs (those the config leaves out), decoupled, no batching; a
        pooling model's (``"runner": "pooling"`` in its model.json) are ``text_input`` -> ``embedding``."""
        pooling = version_dir is not None and _is_pooling(version_dir / ENGINE_ARGS_FILENAME)
        have_in = {t.name for t in config.input}
        for name, data_type, dim in POOLING_INPUTS if pooling else INPUTS:
            if name not in have_in:
                config.input.add(name=name, data_type=data_type, dims=[dim], optional=name != "text_input")
        have_out = {t.name for t in config.output}
        for name, data_type, dim in POOLING_OUTPUTS if pooling else OUTPUTS:
            if name not in have_out:
                config.output.add(name=name, data_type=data_type, dims=[dim])
        config.model_transaction_policy.decoupled = True
        config.max_batch_size = 0

    def load_model(self, context: ModelLoadContext) -> Model:
        if not context.config.model_transaction_policy.decoupled:
            raise InvalidArgument(
                f"model '{context.name}': the vLLM backend must be configured to use decoupled model transaction policy"
            )
        if context.loop is None:
            raise Unavailable(f"model '{context.name}': the vLLM backend runs on the server's event loop; "
                              "load it through a server")  # fmt: skip
        args = read_engine_args(context.version_dir / ENGINE_ARGS_FILENAME, context.name)
        args.setdefault("served_model_name", context.name)  # the model_name label of vllm:* metrics
        loras = read_loras(context.version_dir / MULTI_LORA_FILENAME, context.name) if _lora_enabled(args) else {}
        with model_logs(context.name):  # vLLM logs as it is first imported
            from inferd_backend_vllm.engine import Engine

        return VllmModel(Engine(args, context.name, str(context.version), context.loop, loras))


def _is_pooling(path: Path) -> bool:
    """Whether ``path`` (model.json) asks for vLLM's pooling runner; False when unreadable (the
    load reports it)."""
    try:
        args = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(args, dict) and args.get("runner") == "pooling"


def _lora_enabled(args: dict[str, Any]) -> bool:
    """``enable_lora``, a boolean or (as Triton's vLLM backend's samples write it) the string "true";
    normalised in ``args`` for vLLM."""
    value = args.get("enable_lora", False)
    enabled = value.strip().lower() == "true" if isinstance(value, str) else bool(value)
    args["enable_lora"] = enabled
    return enabled


def read_loras(path: Path, model: str) -> dict[str, str]:
    """The adapters of ``multi_lora.json`` (name -> directory; a relative one is beside the file)."""
    if not path.is_file():
        raise InvalidArgument(f"model '{model}': 'enable_lora' is set but there is no '{MULTI_LORA_FILENAME}' "
                              f"in '{path.parent}' (a JSON object of adapter name -> adapter directory)")  # fmt: skip
    try:
        loras = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"model '{model}': cannot read '{path}': {exc}") from None
    if not isinstance(loras, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in loras.items()):
        raise InvalidArgument(f"model '{model}': '{path}' must be a JSON object of adapter name -> directory")
    out: dict[str, str] = {}
    for name, where in loras.items():
        adapter = Path(where) if Path(where).is_absolute() else path.parent / where
        if not (adapter / "adapter_config.json").is_file():
            raise InvalidArgument(
                f"model '{model}': LoRA adapter '{name}' in '{path}': no adapter_config.json in '{adapter}'"
            )
        out[name] = str(adapter)
    return out


def read_engine_args(path: Path, model: str) -> dict[str, Any]:
    """The engine arguments of ``model.json`` (a JSON object), with errors naming the file."""
    if not path.is_file():
        raise InvalidArgument(
            f"model '{model}': '{ENGINE_ARGS_FILENAME}' containing vllm engine args must be provided in '{path.parent}'"
        )
    try:
        args = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"model '{model}': cannot read '{path}': {exc}") from None
    if not isinstance(args, dict) or not isinstance(args.get("model"), str):
        raise InvalidArgument(f"model '{model}': '{path}' must be a JSON object with a 'model' string")
    for key in FRONTEND_KEYS:  # the OpenAI frontend's, as vllm serve's flags: no engine arguments
        args.pop(key, None)
    model_path = Path(args["model"])
    if not model_path.is_absolute() and (path.parent / model_path).exists():
        args["model"] = str(path.parent / model_path)  # a directory beside model.json
    return args


class VllmModel(Model):
    """One engine per model version; its instances share it. ``chat_engine`` (the contract's
    ``Model.chat_engine``): what text frontends read of it (the engine's tokenizer, context length
    and chat rendering)."""

    def __init__(self, engine: Engine) -> None:
        from inferd_backend_vllm.chat import VllmChat

        self.engine = engine
        self.chat_engine = VllmChat(engine.engine)
        #: The LoRA adapters a request may name (the OpenAI API serves each as a model name).
        self.lora_adapters: tuple[str, ...] = tuple(engine.loras)
        #: Whether the engine embeds (vLLM's pooling runner) rather than generates.
        self.pooling = engine.pooling

    def create_instance(self, spec: InstanceSpec) -> AsyncInstance:
        return VllmInstance(self.engine)

    def unload(self) -> None:
        self.engine.shutdown()


class VllmInstance(AsyncInstance):
    """Hands each request to the engine; responses go out through the request's sender.

    Asynchronous: ``execute`` runs on the event loop, where it only starts each request's task."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        for request in requests:
            self.engine.submit(request)
        return []
