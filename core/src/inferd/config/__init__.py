"""Model configuration: Triton's ``ModelConfig`` schema, parsing, defaults and validation.

``model_config.proto`` has Triton's message names and field numbers, so a Triton config.pbtxt
parses unchanged and :func:`config_to_json` prints what Triton prints.
"""

from inferd.config.model_config_pb2 import ModelConfig
from inferd.config.normalize import normalize, version_policy_select
from inferd.config.parameters import ModelParameters
from inferd.config.parse import (
    config_from_json,
    config_to_json,
    config_to_json_bytes,
    load_config,
    parse_config_text,
)
from inferd.config.platforms import DEFAULT_MODEL_FILENAMES, backend_for, backend_of_platform, platform_for
from inferd.config.validate import validate

__all__ = [
    "ModelParameters",
    "DEFAULT_MODEL_FILENAMES",
    "ModelConfig",
    "backend_for",
    "backend_of_platform",
    "config_from_json",
    "config_to_json",
    "config_to_json_bytes",
    "load_config",
    "normalize",
    "parse_config_text",
    "platform_for",
    "validate",
    "version_policy_select",
]
