"""What a vLLM model version asks for: its ``model.json`` (vLLM's engine arguments, as in Triton's
vLLM backend) and its LoRA adapters (``multi_lora.json``), read once per load (no vLLM import here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from inferd.api import InvalidArgument

ENGINE_ARGS_FILENAME = "model.json"
#: Keys of ``model.json`` the OpenAI frontend reads (``vllm serve``'s ``--chat-template`` and
#: ``--tool-call-parser``), kept out of the engine arguments.
FRONTEND_KEYS = ("chat_template", "tool_call_parser")
#: Triton's vLLM backend's LoRA adapters, beside model.json: ``{"name": "/path/to/adapter", ...}``.
MULTI_LORA_FILENAME = "multi_lora.json"


@dataclass(frozen=True, slots=True)
class VllmOptions:
    """One version's engine arguments (for ``AsyncEngineArgs``) and LoRA adapters (name -> directory)."""

    engine_args: Mapping[str, Any]
    loras: Mapping[str, str]

    @property
    def pooling(self) -> bool:
        """Whether the engine embeds (vLLM's pooling runner, ``"runner": "pooling"``) rather than generates."""
        return self.engine_args.get("runner") == "pooling"


def parse_options(version_dir: Path, model: str) -> VllmOptions:
    """Read ``model.json`` (and ``multi_lora.json`` when it enables LoRA); InvalidArgument names the file."""
    args = read_engine_args(version_dir / ENGINE_ARGS_FILENAME, model)
    args.setdefault("served_model_name", model)  # the model_name label of vllm:* metrics
    loras = read_loras(version_dir / MULTI_LORA_FILENAME, model) if _lora_enabled(args) else {}
    return VllmOptions(MappingProxyType(args), MappingProxyType(loras))


def is_pooling(path: Path) -> bool:
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
        raise InvalidArgument(
            f"model '{model}': 'enable_lora' is set but there is no '{MULTI_LORA_FILENAME}' in '{path.parent}' "
            f"(a JSON object of adapter name -> adapter directory)"
        )
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
