"""The "vllm" backend: Triton's vLLM backend layout (``<version>/model.json``), decoupled.

Config completion imports no vLLM; loading a version starts one engine shared by its instances.
An instance's ``execute`` only hands requests to the engine and returns (it is non-blocking: it
runs on the server's event loop, where the engine's tasks run too); the engine batches them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from inferd.api import (
    SOURCES,
    AsyncInstance,
    Backend,
    InstanceSpec,
    InvalidArgument,
    MemoryUsage,
    Model,
    ModelLoadContext,
    Unavailable,
)
from inferd_backend_vllm.instance import VllmInstance
from inferd_backend_vllm.logs import model_logs
from inferd_backend_vllm.memory import engine_device_bytes
from inferd_backend_vllm.metrics import VLLM_METRICS
from inferd_backend_vllm.options import ENGINE_ARGS_FILENAME, is_pooling, parse_options
from inferd_backend_vllm.tensors import INPUTS, OUTPUTS, POOLING_INPUTS, POOLING_OUTPUTS

if TYPE_CHECKING:
    from inferd.api import ModelConfig
    from inferd_backend_vllm.engine import Engine


class VllmBackend(Backend):
    """Serves ``<version>/model.json`` (vLLM engine arguments) with vLLM's ``AsyncLLM``."""

    name = "vllm"
    default_model_filename = ENGINE_ARGS_FILENAME

    def __init__(self) -> None:
        SOURCES.add(VLLM_METRICS)  # vLLM's own vllm:* families, on /metrics

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Triton's inputs and outputs (those the config leaves out), decoupled, no batching; a
        pooling model's (``"runner": "pooling"`` in its model.json) are ``text_input`` -> ``embedding``."""
        pooling = version_dir is not None and is_pooling(version_dir / ENGINE_ARGS_FILENAME)
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
            raise Unavailable(
                f"model '{context.name}': the vLLM backend runs on the server's event loop; load it through a server"
            )
        options = parse_options(context.version_dir, context.name)
        with model_logs(context.name):  # vLLM logs as it is first imported
            from inferd_backend_vllm.engine import Engine

        return VllmModel(Engine(options, context.name, str(context.version), context.loop))


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
        #: What the engine holds on each GPU (read once: vLLM sizes itself when it starts).
        self.device_bytes = engine_device_bytes(engine.engine)

    def create_instance(self, spec: InstanceSpec) -> AsyncInstance:
        return VllmInstance(self.engine)

    def memory_usage(self) -> MemoryUsage | None:
        """The engine's GPU memory (its ``gpu_memory_utilization`` of each device), None off CUDA."""
        return MemoryUsage(device_bytes=self.device_bytes) if self.device_bytes else None

    def unload(self) -> None:
        self.engine.shutdown()
