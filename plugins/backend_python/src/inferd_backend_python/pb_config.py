"""``pb_utils.ModelConfig``: what a model's ``auto_complete_config`` receives and returns.

It wraps Triton's JSON form of the configuration. Only ``max_batch_size``, ``input``, ``output``,
``dynamic_batching`` and ``model_transaction_policy`` may be changed, with Triton's checks and
error messages (which raise ``ValueError``).
"""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


def _dims(value: Any) -> list[int]:
    return [int(d) for d in value or ()]


class ModelConfig:
    """The model configuration during auto-complete: ``ModelConfig(json_string_or_dict)``."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, (str, bytes)) else model_config
        self._model_config: dict[str, Any] = config
        config.setdefault("name", "")
        config.setdefault("max_batch_size", 0)
        config.setdefault("input", [])
        config.setdefault("output", [])

    @property
    def _name(self) -> str:
        return str(self._model_config["name"])

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict (read it; change it through the ``set_``/``add_`` methods)."""
        return self._model_config

    def max_batch_size(self) -> int:
        return int(self._model_config["max_batch_size"])

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Raises ValueError if the configuration already sets a larger max_batch_size."""
        current = int(self._model_config["max_batch_size"])
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless the configuration chose another scheduler."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        """Add an input, or complete the configured input of that name (conflicts raise ValueError)."""
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output, or complete the configured output of that name (conflicts raise ValueError)."""
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        label = tensor.get("name", "")
        for key in tensor:
            if key not in allowed:
                names = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model "
                    f"'{self._name}' contains property other than {names}."
                )
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                where = f"{kind} '{label}'" if key != "name" else kind
                raise ValueError(
                    f"{where} in auto-complete-config function for model '{self._name}' is missing '{key}' property."
                )
        for current in self._model_config[kind]:
            if current.get("name") != tensor["name"]:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{current_type} for {kind} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}"
                )
            current_dims = _dims(current.get("dims"))
            if current_dims and current_dims != _dims(tensor["dims"]):
                raise ValueError(
                    f"model '{self._name}', tensor '{tensor['name']}': the model expects dims "
                    f"{_dims(tensor['dims'])} but the model configuration specifies dims "
                    f"{current_dims}"
                )
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = _dims(tensor["dims"])
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        added = dict(tensor)
        added["dims"] = _dims(tensor["dims"])
        self._model_config[kind].append(added)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (only ``decoupled``; changing a set value raises)."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            # The JSON has 'decoupled' when the config sets model_transaction_policy (even to false).
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
