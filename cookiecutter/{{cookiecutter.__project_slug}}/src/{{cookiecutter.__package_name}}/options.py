"""What a "{{ cookiecutter.backend_name }}" model asks for, read from its config once, at load.

A real backend reads its ``parameters`` here (``parameters { key: "..." value: { string_value:
"..." } }`` in config.pbtxt) with :class:`inferd.api.ModelParameters`, whose ``flag``,
``integer`` and ``number`` raise a ``ConfigError`` naming the model, the key and the value::

    params = ModelParameters(config, model)
    threads = params.integer("thread_count", 0)

Keep this module free of your framework: it only reads the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.api import ConfigError

if TYPE_CHECKING:
    from inferd.api import ModelConfig


@dataclass(frozen=True, slots=True)
class {{ cookiecutter.__class_prefix }}Options:
    """One model's settings, shared by its instances."""

    #: (input, output) names by index: each output echoes its input.
    pairs: tuple[tuple[str, str], ...]


def parse_options(config: ModelConfig, model: str) -> {{ cookiecutter.__class_prefix }}Options:
    """Read the config; raise ``ConfigError`` naming the model and the fix when it cannot work."""
    return {{ cookiecutter.__class_prefix }}Options(pairs=_pairs(config, model))


def _pairs(config: ModelConfig, model: str) -> tuple[tuple[str, str], ...]:
    """(input, output) names by index; outputs must match their inputs' datatype and dims."""
    if len(config.input) != len(config.output):
        raise ConfigError(
            f"model '{model}': the {{ cookiecutter.backend_name }} backend needs one output per input, "
            f"got {len(config.input)} inputs and {len(config.output)} outputs"
        )
    for index, (inp, out) in enumerate(zip(config.input, config.output, strict=True)):
        if inp.data_type != out.data_type or list(inp.dims) != list(out.dims):
            raise ConfigError(
                f"model '{model}': output {index} '{out.name}' must have the datatype and dims of "
                f"input {index} '{inp.name}'"
            )
    return tuple((inp.name, out.name) for inp, out in zip(config.input, config.output, strict=True))
