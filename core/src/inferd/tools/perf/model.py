"""What the tool learns about a model from its metadata and configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from inferd.config import ModelConfig


@dataclass(frozen=True)
class TensorSpec:
    """An input or output as the metadata endpoint describes it (shape includes the batch dim)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    """Metadata and configuration of the model under test."""

    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    config: ModelConfig

    @property
    def max_batch_size(self) -> int:
        return int(self.config.max_batch_size)

    @property
    def is_sequence(self) -> bool:
        return self.config.HasField("sequence_batching")

    @property
    def is_decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)

    @property
    def response_cache(self) -> bool:
        return bool(self.config.response_cache.enable)


def _specs(items: Any) -> tuple[TensorSpec, ...]:
    """TensorSpecs from HTTP metadata dicts or gRPC ``TensorMetadata`` messages."""
    out = []
    for t in items:
        if isinstance(t, dict):
            out.append(TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", []))))
        else:
            out.append(TensorSpec(t.name, t.datatype, tuple(int(d) for d in t.shape)))
    return tuple(out)


def config_from_server(raw: Any) -> ModelConfig:
    """A ``ModelConfig`` from ``GET .../config`` JSON (a dict) or a gRPC ``ModelConfig`` message.

    Unknown fields (a newer server) are ignored: the tool needs only a few of them.
    """
    config = ModelConfig()
    if isinstance(raw, dict):
        json_format.ParseDict(raw.get("config", raw), config, ignore_unknown_fields=True)
    else:
        config.ParseFromString(raw.SerializeToString())
    return config


def model_info(metadata: Any, raw_config: Any, version: str) -> ModelInfo:
    """Combine the metadata and config responses of either protocol."""
    name = metadata["name"] if isinstance(metadata, dict) else metadata.name
    inputs = _specs(metadata.get("inputs", []) if isinstance(metadata, dict) else metadata.inputs)
    outputs = _specs(metadata.get("outputs", []) if isinstance(metadata, dict) else metadata.outputs)
    return ModelInfo(name, version, inputs, outputs, config_from_server(raw_config))
