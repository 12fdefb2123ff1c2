"""A model's inputs and outputs as ONNX Runtime reports them: auto-complete and config checks.

Framework-free: it works on anything with ``name``, ``type`` and ``shape`` attributes (what
``InferenceSession.get_inputs()`` returns), so the rules can be tested without a session. The
rules are Triton's onnxruntime backend's (``AutoCompleteConfig``, ``ValidateInputs``,
``ValidateOutputs``, ``CompareDimsSupported``); the messages say more. A sequence model's control
tensors (``sequence_batching.control_input``) and implicit state inputs / outputs
(``sequence_batching.state``) are model inputs and outputs the sequence batcher feeds and reads,
not ones a client sends, so they count as the config's inputs and outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.api import ConfigError, DataType

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger(__name__)

#: ONNX Runtime's type strings -> config.pbtxt data types.
ORT_TO_CONFIG: dict[str, str] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """One graph input or output: config data type (``""`` if unservable), dims with -1 for dynamic."""

    name: str
    config_type: str
    dims: tuple[int, ...]
    ort_type: str

    @property
    def is_string(self) -> bool:
        return self.config_type == "TYPE_STRING"


def graph_tensors(node_args: Iterable[Any]) -> list[GraphTensor]:
    """GraphTensors from ORT ``NodeArg`` objects; symbolic (str) and unknown (None) dims become -1."""
    out = []
    for arg in node_args:
        dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or ()))
        out.append(GraphTensor(arg.name, ORT_TO_CONFIG.get(arg.type, ""), dims, arg.type))
    return out


def shape_str(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _type_name(tensor: Any) -> str:
    return str(DataType.Name(tensor.data_type))


def _servable(model: str, info: GraphTensor, kind: str) -> None:
    if info.config_type == "TYPE_BF16":
        raise ConfigError(
            f"unable to load model '{model}': {kind} '{info.name}' is bfloat16, which onnxruntime's Python "
            f"API cannot exchange with numpy; this backend does not serve BF16 tensors"
        )
    if not info.config_type:
        raise ConfigError(
            f"unable to load model '{model}': {kind} '{info.name}' has ONNX type '{info.ort_type}', "
            f"which has no inference protocol datatype (only tensors of numbers, bool and string are served)"
        )


# -- sequence batching ---------------------------------------------------------------------------

_CONTROL_TYPES = {"int32_false_true": "TYPE_INT32", "fp32_false_true": "TYPE_FP32", "bool_false_true": "TYPE_BOOL"}


def sequence_inputs(config: ModelConfig) -> dict[str, str]:
    """Inputs the sequence batcher feeds (control tensors, then state inputs) -> config data type."""
    if config.WhichOneof("scheduling_choice") != "sequence_batching":
        return {}
    fed: dict[str, str] = {}
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            kind = next((t for f, t in _CONTROL_TYPES.items() if len(getattr(control, f))), None)
            fed[control_input.name] = kind or _type_name(control)
    for state in config.sequence_batching.state:
        fed[state.input_name] = _type_name(state)
    return fed


def state_outputs(config: ModelConfig) -> dict[str, str]:
    """Implicit state outputs the sequence batcher reads back -> config data type."""
    if config.WhichOneof("scheduling_choice") != "sequence_batching":
        return {}
    return {state.output_name: _type_name(state) for state in config.sequence_batching.state}


def run_output_names(config: ModelConfig) -> list[str]:
    """The outputs to compute: the config's, then state outputs the config does not list."""
    names = [t.name for t in config.output]
    return names + [n for n in state_outputs(config) if n not in names]


def _check_sequence(model: str, kind: str, expected: dict[str, str], infos: dict[str, GraphTensor]) -> None:
    what = "sequence control or state input" if kind == "input" else "sequence state output"
    for name, config_type in expected.items():
        info = infos.get(name)
        if info is None:
            raise ConfigError(
                f"unable to load model '{model}': configuration specified {what} '{name}' "
                f"(sequence_batching), but the model has no {kind} of that name; model {kind}s: "
                f"{', '.join(infos) or 'none'}"
            )
        if info.config_type != config_type:
            raise ConfigError(
                f"unable to load model '{model}': {what} '{name}' is {config_type} in sequence_batching, "
                f"model provides {info.config_type or info.ort_type}"
            )


# -- auto-complete ------------------------------------------------------------------------------


def autocomplete(
    config: ModelConfig,
    model: str,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    default_max_batch_size: int,
) -> None:
    """Fill max_batch_size, dynamic_batching, inputs and outputs the way Triton's ORT backend does.

    An input or output list the config already has is kept as it is; the checks at load time
    compare it with the model.
    """
    fed = {**sequence_inputs(config), **state_outputs(config)}
    inputs = [i for i in inputs if i.name not in fed]
    outputs = [o for o in outputs if o.name not in fed]
    _autocomplete_max_batch(config, model, inputs, outputs, default_max_batch_size)
    for kind, infos, field in (("input", inputs, config.input), ("output", outputs, config.output)):
        if len(field) > 0:
            continue
        for info in infos:
            _servable(model, info, kind)
            entry = field.add(name=info.name, data_type=DataType.Value(info.config_type))
            dims = info.dims[1:] if config.max_batch_size > 0 else info.dims
            if dims:
                entry.dims.extend(dims)
            else:
                # A tensor with no dims left is a scalar (or only a batch): Triton declares it
                # as [1] and, when batching, reshapes it to [] for the model.
                entry.dims.append(1)
                if config.max_batch_size > 0:
                    entry.reshape.SetInParent()


def _autocomplete_max_batch(
    config: ModelConfig,
    model: str,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    default_max_batch_size: int,
) -> None:
    batchable = all(info.dims and info.dims[0] == -1 for info in (*inputs, *outputs))
    if not batchable:
        if config.max_batch_size != 0:
            fixed = [i.name for i in (*inputs, *outputs) if not i.dims or i.dims[0] != -1]
            raise ConfigError(
                f"autofill failed for model '{model}': model does not support batching while non-zero "
                f"max_batch_size is specified; max_batch_size is {config.max_batch_size} but the first dimension "
                f"of {', '.join(repr(n) for n in fixed)} is not dynamic (-1)"
            )
        return
    if config.max_batch_size == 0:
        config.max_batch_size = max(default_max_batch_size, 0)
        log.warning(
            "autofilled max_batch_size to %d for model '%s' since batching is supported but no "
            "max_batch_size is specified in model configuration. Must specify max_batch_size to "
            "utilize autofill with a larger max batch size",
            config.max_batch_size,
            model,
        )
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()


# -- checks at load -----------------------------------------------------------------------------


def check_config(
    config: ModelConfig,
    model: str,
    inputs: Sequence[GraphTensor],
    outputs: Sequence[GraphTensor],
    overridable: Sequence[GraphTensor] = (),
) -> None:
    """Raise ConfigError when the config's inputs or outputs disagree with the model, with the
    sentences of Triton's onnxruntime backend (``ValidateInputs``, ``ValidateOutputs``,
    ``CompareDimsSupported``) first and inferd's hint after ``; ``.

    The config lists every model input (optional ones are overridable initializers), the batch
    inputs, and the sequence batcher's control and state inputs; it may list a subset of the
    outputs. Data types must be equal; dims are compared as Triton does, except that a config
    -1 is refused where the model has a fixed dimension (Triton accepts it and fails at run time).
    """
    by_name = {i.name: i for i in inputs}
    allowed = {**{i.name: i for i in overridable}, **by_name}
    fed = sequence_inputs(config)
    expected = sum(1 for t in config.input if not t.optional) + len(config.batch_input) + len(fed)
    if len(by_name) != expected:
        listed = [t.name for t in config.input] + list(fed)
        missing = [n for n in by_name if n not in listed]
        extra = [n for n in listed if n not in allowed]
        hint = "the counts differ"
        if missing:
            hint = f"model input(s) {', '.join(repr(n) for n in missing)} are not in the configuration"
        elif extra:
            hint = f"configuration input(s) {', '.join(repr(n) for n in extra)} are not in the model"
        raise ConfigError(
            f"unable to load model '{model}', configuration expects {expected} inputs, model provides "
            f"{len(by_name)}; {hint} (it lists: {', '.join(listed) or 'none'}; model inputs: "
            f"{', '.join(by_name) or 'none'})"
        )
    _check_sequence(model, "input", fed, allowed)
    for index, tensor in enumerate(config.input):
        if tensor.optional and config.max_batch_size != 0:
            raise ConfigError(
                f"unable to load model '{model}', optional input '{tensor.name}' is not supported for "
                f"models that support batching"
            )
        _check_tensor(config, model, "input", index, tensor, allowed, exact=False)
    outs = {o.name: o for o in outputs}
    _check_sequence(model, "output", state_outputs(config), outs)
    for index, tensor in enumerate(config.output):
        _check_tensor(config, model, "output", index, tensor, outs, exact=True)


def _check_tensor(
    config: ModelConfig, model: str, kind: str, index: int, tensor: Any, infos: dict[str, GraphTensor], exact: bool
) -> None:
    where = f"{kind}[{index}]"
    info = infos.get(tensor.name)
    if info is None:
        raise ConfigError(
            f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: {', '.join(sorted(infos))}; "
            f"model '{model}', configuration {where}"
        )
    _servable(model, info, kind)
    config_type = _type_name(tensor)
    if config_type != info.config_type:
        raise ConfigError(
            f"unable to load model '{model}', configuration expects datatype {config_type} for {kind} "
            f"'{tensor.name}', model provides {info.config_type}"
        )
    has_reshape = tensor.HasField("reshape")
    dims = tuple(tensor.reshape.shape) if has_reshape else tuple(tensor.dims)
    if kind == "input" and tensor.allow_ragged_batch:
        if info.dims != (-1,):
            raise ConfigError(
                f"unable to load model '{model}', configuration expects model provides input with shape [-1]  "
                f"for ragged input '{tensor.name}', model provides {shape_str(info.dims)}"
            )
        return
    if not info.dims:  # a scalar in the model: the config may only say [1] (or [])
        if any(d != 1 for d in dims):
            raise ConfigError(
                f"unable to load model '{model}', scalar tensor '{tensor.name}', should only provide 1 in the "
                f"model configuration when the model doesn't support batching. Model configuration provided: "
                f"{shape_str(dims)}."
            )
        return
    _compare_dims(model, tensor.name, info.dims, dims, config.max_batch_size, exact)


def _compare_dims(
    model: str,
    name: str,
    model_dims: tuple[int, ...],
    dims: tuple[int, ...],
    max_batch_size: int,
    exact: bool,
) -> None:
    """Triton's ``CompareDimsSupported`` sentences (a config -1 must meet a model -1)."""
    head = f"model '{model}', tensor '{name}': "
    if max_batch_size > 0:
        if model_dims[0] != -1:
            raise ConfigError(
                f"{head}for the model to support batching the shape should have at least 1 dimension and the "
                f"first dimension must be -1; but shape expected by the model is {shape_str(model_dims)}; "
                f"set max_batch_size: 0 or give the model a dynamic batch dimension"
            )
        full = (-1, *dims)
    else:
        full = dims
    ok = len(full) == len(model_dims) and all(m == c for m, c in zip(model_dims, full, strict=True) if exact or m != -1)
    if ok:
        return
    specifies = (
        f"{len(full)} dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit "
        f"tensor shape, making complete shape {shape_str(full)})"
        if max_batch_size > 0
        else f"{len(full)} dimensions (shape {shape_str(full)})"
    )
    hint = ""
    if len(full) == len(model_dims):
        index = next(i for i, (m, c) in enumerate(zip(model_dims, full, strict=True)) if m != c and (exact or m != -1))
        hint = f"; dimension {index} differs: the model has {model_dims[index]}, the configuration {full[index]}"
    elif max_batch_size == 0 and len(model_dims) == len(dims) + 1 and model_dims[0] == -1:
        hint = "; the model's first dimension is dynamic: set max_batch_size > 0 to make it the batch dimension"
    raise ConfigError(
        f"{head}the model expects {len(model_dims)} dimensions (shape {shape_str(model_dims)}) but the model "
        f"configuration specifies {specifies}{hint}"
    )
