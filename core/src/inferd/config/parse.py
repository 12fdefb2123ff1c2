"""Reading config.pbtxt / JSON into a ``ModelConfig`` and printing it as Triton's JSON."""

from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from inferd.config.model_config_pb2 import ModelConfig
from inferd.contracts.errors import ConfigError
from inferd.contracts.hints import did_you_mean

CONFIG_FILENAME = "config.pbtxt"
CONFIGS_FOLDER = "configs"  # Triton's --model-config-name looks here

_NO_FIELD = re.compile(r'Message type "(?:inference\.)?([\w.]+)" has no field named "(\w+)"')
_NO_ENUM = re.compile(r'Enum type "(?:inference\.)?([\w.]+)" has no value named (\w+)')
_POSITION = re.compile(r"^\d+:\d+ : (?:'.*?': )?", re.DOTALL)


def parse_config_text(text: str, source: str) -> ModelConfig:
    """Parse config.pbtxt text; errors name ``source``, the line, the column and the field."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        line, column = exc.GetLine(), exc.GetColumn()
        detail = _explain(_POSITION.sub("", str(exc)), text, line)
        where = f" line {line} column {column}" if line else ""
        raise ConfigError(f"{source}{where}: {detail}") from None
    return config


def _explain(message: str, text: str, line: int) -> str:
    """Turn protobuf's parse error into a message naming the field and what was expected."""
    if match := _NO_FIELD.search(message):
        type_name, field = match.groups()
        known = _fields_of(type_name)
        hint = difflib.get_close_matches(field, known, n=1)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        return f"unknown field '{field}' in {type_name}{suggestion}"
    if match := _NO_ENUM.search(message):
        enum_name, value = match.groups()
        source_line = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        field = re.search(rf"(\w+)\s*:\s*{re.escape(value)}\b", source_line)
        values = _enum_values(enum_name)
        prefix = f"field '{field.group(1)}': " if field else ""
        mean = did_you_mean(value, values)
        close = f" ({mean})" if mean else ""
        return f"{prefix}unknown value '{value}' for {enum_name}{close}; expected one of {', '.join(values)}"
    return message.rstrip(".")


def _descriptor_of(type_name: str) -> Any:
    pool = ModelConfig.DESCRIPTOR.file.pool
    return pool.FindMessageTypeByName(f"inference.{type_name}")


def _fields_of(type_name: str) -> list[str]:
    try:
        return [f.name for f in _descriptor_of(type_name).fields]
    except KeyError:
        return []


def _enum_values(enum_name: str) -> list[str]:
    pool = ModelConfig.DESCRIPTOR.file.pool
    try:
        return [v.name for v in pool.FindEnumTypeByName(f"inference.{enum_name}").values]
    except KeyError:
        return []


def load_config(model_dir: Path, config_name: str | None = None) -> ModelConfig | None:
    """Read ``<model_dir>/config.pbtxt``; None when there is none.

    With ``config_name`` (Triton's ``--model-config-name``), ``<model_dir>/configs/<name>.pbtxt``
    is read instead when it exists.
    """
    model_dir = Path(model_dir)
    path = model_dir / CONFIG_FILENAME
    if config_name:
        custom = model_dir / CONFIGS_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            path = custom
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"model '{model_dir.name}': cannot read {path}: {exc}") from None
    relative = path.relative_to(model_dir).as_posix()
    return parse_config_text(text, f"model '{model_dir.name}': {relative}")


def config_from_json(obj: dict[str, Any] | str, source: str) -> ModelConfig:
    """Parse the JSON form of a config (Triton's load API ``parameters.config``)."""
    config = ModelConfig()
    try:
        if isinstance(obj, str):
            json_format.Parse(obj, config)
        else:
            json_format.ParseDict(obj, config)
    except json_format.ParseError as exc:
        message = str(exc).split("\n")[0].rstrip(".")
        raise ConfigError(f"{source}: invalid model configuration JSON: {message}") from None
    return config


# int64/uint64 fields Triton prints as JSON numbers (its ModelConfigToJson fix-ups). Others
# (cuda graph_spec dims, secondary_devices.device_id, state.initial_state.dims) stay strings,
# as protobuf prints them, because Triton does not fix them.
def _fix_numbers(doc: dict[str, Any]) -> None:
    def ints(obj: dict[str, Any] | None, *keys: str) -> None:
        for key in keys:
            if obj is not None and key in obj:
                value = obj[key]
                obj[key] = [int(v) for v in value] if isinstance(value, list) else int(value)

    for io in doc.get("input", []) + doc.get("output", []):
        ints(io, "dims")
        ints(io.get("reshape"), "shape")
    ints(doc.get("version_policy", {}).get("specific"), "versions")
    if (db := doc.get("dynamic_batching")) is not None:
        ints(db, "max_queue_delay_microseconds", "priority_levels", "default_priority_level")
        ints(db.get("default_queue_policy"), "default_timeout_microseconds")
        for policy in db.get("priority_queue_policy", {}).values():
            ints(policy, "default_timeout_microseconds")
    if (sb := doc.get("sequence_batching")) is not None:
        ints(sb, "max_sequence_idle_microseconds")
        ints(sb.get("oldest"), "max_queue_delay_microseconds")
        ints(sb.get("direct"), "max_queue_delay_microseconds")
        for state in sb.get("state", []):
            ints(state, "dims")
    for step in doc.get("ensemble_scheduling", {}).get("step", []):
        ints(step, "model_version")
    for warmup in doc.get("model_warmup", []):
        for warm_input in warmup.get("inputs", {}).values():
            ints(warm_input, "dims")


def _integral_floats(obj: Any) -> Any:
    """C++ protobuf prints 1.0 as ``1``; do the same so the JSON text matches Triton's."""
    if isinstance(obj, float) and math.isfinite(obj) and obj.is_integer():
        return int(obj)
    if isinstance(obj, list):
        return [_integral_floats(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _integral_floats(v) for k, v in obj.items()}
    return obj


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """The JSON Triton returns for ``GET /v2/models/<model>/config``.

    Proto field names, every field without presence printed (defaults included), enums by name,
    and the 64-bit fields Triton fixes up printed as numbers. An empty config gives ``{}``.
    """
    if config.ByteSize() == 0:
        return {}
    doc = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    _fix_numbers(doc)
    return _integral_floats(_declared_order(ModelConfig.DESCRIPTOR, doc))


def _declared_order(descriptor: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """Keys in the .proto's declaration order, the order Triton's C++ JSON printer uses
    (``name, platform, backend, runtime, version_policy, ...``); Python's follows field numbers."""
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name not in doc:
            continue
        value = doc[field.name]
        sub = field.message_type
        if sub is not None:
            if sub.GetOptions().map_entry:
                inner = sub.fields_by_name["value"].message_type
                if inner is not None:
                    value = {k: _declared_order(inner, v) for k, v in value.items()}
            elif isinstance(value, list):
                value = [_declared_order(sub, v) for v in value]
            elif isinstance(value, dict):
                value = _declared_order(sub, value)
        out[field.name] = value
    return out


def config_to_json_bytes(config: ModelConfig) -> bytes:
    """``config_to_json`` as compact UTF-8 JSON, the way Triton writes it."""
    return json.dumps(config_to_json(config), separators=(",", ":")).encode()
