"""Triton's model-configuration QA (``qa/L0_model_config``), its ONNX and Python cases, on a real
``inferd serve``.

Triton's ``test.sh`` starts the server on each invalid model and greps the log for an error line
(``^E[0-9]{4}``) holding the case's expected sentence; for the valid ones it compares the
auto-completed config (gRPC ``ModelConfig`` equality) with the expected one. Here the cases are
data written in this file (configs, Python models, ONNX graphs built with the ``onnx`` package),
one server per server flag set runs every case of that set (``--exit-on-error=false``), and each
case is checked the way ``test.sh`` checks it, the sentence matched as plain text rather than as a
grep pattern. The expected configs are Triton 2.51's on a machine without a GPU (checked against
the reference server in ../shared/triton for the Python ones): ``KIND_CPU`` groups, where the QA's
files, written on a GPU machine, have ``KIND_GPU`` ones.

Left out: the TensorRT, PyTorch, OpenVINO, custom and ensemble cases (other backends), and
``special_cases/invalid_runtime`` and ``runtime_escape`` (they need Triton's ``identity`` backend
library).
"""

from __future__ import annotations

import json
import re
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.model_config_pb2 as mc
import tritonclient.http as httpclient
from google.protobuf import json_format, text_format
from onnx import TensorProto, helper

from inferd.testing import ServerProcess

# -- ONNX graphs ----------------------------------------------------------------------------------


def _add_sub_onnx(batching: bool) -> bytes:
    """INPUT0, INPUT1 (INT32 [16], a leading dynamic batch dimension when ``batching``) ->
    OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, as INT8."""
    lead = ["batch"] if batching else []
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["sum"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["diff"]),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.INT8),
        helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.INT8),
    ]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32, [*lead, 16]) for n in ("INPUT0", "INPUT1")]
    outs = [helper.make_tensor_value_info(n, TensorProto.INT8, [*lead, 16]) for n in ("OUTPUT0", "OUTPUT1")]
    return _model(helper.make_graph(nodes, "add_sub", ins, outs))


def _identity_fp16_onnx() -> bytes:
    """INPUT0 -> OUTPUT0, FP16, three dynamic dimensions."""
    node = helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])
    dims = ["b", "h", "w"]
    graph = helper.make_graph([node], "identity", [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT16, dims)],
                              [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT16, dims)])  # fmt: skip
    return _model(graph)


def _model(graph: onnx.GraphProto) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


# -- Python models --------------------------------------------------------------------------------

F32_4 = '"data_type": "TYPE_FP32", "dims": [4]'
TWO_IN = [f'{{"name": "INPUT0", {F32_4}}}', f'{{"name": "INPUT1", {F32_4}}}']
TWO_OUT = [f'{{"name": "OUTPUT0", {F32_4}}}', f'{{"name": "OUTPUT1", {F32_4}}}']


def _py(max_batch_size: int = 0, inputs: list[str] = TWO_IN, outputs: list[str] = TWO_OUT, calls: str = "",
        returns: bool = True) -> str:  # fmt: skip
    """A model.py whose auto_complete_config sets ``max_batch_size``, adds ``inputs`` and
    ``outputs`` (Python dict literals) and makes ``calls`` on the config."""
    lines = [f"c.set_max_batch_size({max_batch_size})", *(calls.splitlines() if calls else [])]
    lines += [f"c.add_input({i})" for i in inputs] + [f"c.add_output({o})" for o in outputs]
    if returns:
        lines.append("return c")
    body = textwrap.indent("\n".join(lines), " " * 8)
    return (
        "import triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n"
        f"    @staticmethod\n    def auto_complete_config(c):\n{body}\n\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([]) for _ in requests]\n"
    )


def _io(inputs: list[tuple[str, str, str]], outputs: list[tuple[str, str, str]]) -> str:
    """config.pbtxt input/output lists from (name, data_type, dims) triples ('' leaves a field out)."""

    def entries(items: list[tuple[str, str, str]]) -> str:
        return ", ".join(
            "{ " + f'name: "{n}"' + (f" data_type: {t}" if t else "") + (f" dims: [ {d} ]" if d else "") + " }"
            for n, t, d in items
        )

    return (f"input [ {entries(inputs)} ] " if inputs else "") + (f"output [ {entries(outputs)} ]" if outputs else "")


PY_IO = _io([("INPUT0", "TYPE_FP32", "4"), ("INPUT1", "TYPE_FP32", "4")],
            [("OUTPUT0", "TYPE_FP32", "4"), ("OUTPUT1", "TYPE_FP32", "4")])  # fmt: skip
ONNX_IO = _io([("INPUT0", "TYPE_INT32", "16"), ("INPUT1", "TYPE_INT32", "16")],
              [("OUTPUT0", "TYPE_INT8", "16"), ("OUTPUT1", "TYPE_INT8", "16")])  # fmt: skip

# -- noautofill_platform: config validation (platform onnxruntime_onnx) -----------------------------

SEQ_IO = _io([("INPUT", "TYPE_INT32", "1")], [("OUTPUT", "TYPE_INT32", "1")])
BIO_IO = _io([("INPUT", "TYPE_INT32", "-1")], [("OUTPUT", "TYPE_INT32", "-1")])
IMG_IO = 'input [ { name: "data" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 1, 28, 28 ] } ] ' + _io(
    [], [("prob", "TYPE_FP32", "10, 1, 1")]
)


def _control(*controls: tuple[str, str, bool]) -> str:
    """sequence_batching with control inputs (tensor name, kind, with int32_false_true)."""
    items = ", ".join(
        f'{{ name: "{n}" control [ {{ kind: CONTROL_SEQUENCE_{k}'
        + (" int32_false_true: [ 0, 1 ]" if v else "")
        + " } ] }"
        for n, k, v in controls
    )
    return f"max_batch_size: 8 sequence_batching {{ control_input [ {items} ] }} " + SEQ_IO


def _reshape(kind: str, mbs: int, dims: str, shape: str) -> str:
    """One input or output with a reshape; the other side is [1]."""
    tensor = f'{{ name: "{kind}" data_type: TYPE_FP32 dims: [ {dims} ] reshape {{ shape: [ {shape} ] }} }}'
    other = "output" if kind == "input" else "input"
    return (
        f'max_batch_size: {mbs} {kind} [ {tensor} ] {other} [ {{ name: "{other}" data_type: TYPE_FP32 dims: [ 1 ] }} ]'
    )


def _dims(kind: str, dims: str) -> str:
    other = "output" if kind == "input" else "input"
    return f'max_batch_size: 8 {kind} [ {{ name: "{kind}" data_type: TYPE_FP32 dims: [ {dims} ] }} ] ' + (
        f'{other} [ {{ name: "{other}" data_type: TYPE_FP32 dims: [ 1 ] }} ]'
    )


BATCH_IN = ["BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"]
BATCH_IN.append("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE")
DIFFERENT_SIZE = "model {0} '{0}' has different size for dims and reshape"
VARIABLE_DIMS = "model {0} '{0}' has different number of variable-size dimensions for dims and reshape"
RESHAPE_ZERO = "model {0} '{0}' reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"


def _noautofill() -> dict[str, tuple[str, list[str]]]:
    """case -> (config.pbtxt without the platform, Triton's expected sentences with {m} for the model)."""
    cases: dict[str, tuple[str, list[str]]] = {}
    for i, kind in enumerate(BATCH_IN):
        base = f'batch_input [ {{ kind: {kind} target_name: "B" data_type: TYPE_FP32'
        cases[f"batch_input_less_source{i}"] = (
            f"{BIO_IO} {base} }} ]",
            [f"batch input kind '{kind}' expects 1 source input, got 0"],
        )
        cases[f"batch_input_many_source{i}"] = (
            f'{BIO_IO} {base} source_input: ["INPUT", "INPUT"] }} ]',
            [f"batch input kind '{kind}' expects 1 source input, got 2"],
        )
    bout = "kind: BATCH_SCATTER_WITH_INPUT_SHAPE"
    cases.update({
        "batch_input_unknown_source": (
            f'{BIO_IO} batch_input [ {{ kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 '
            'source_input: "UNKNOWN_INPUT" } ]', ["unknown source input name 'UNKNOWN_INPUT'"]),
        "batch_output_duplicated_target": (
            f'{BIO_IO} batch_output [ {{ target_name: ["OUTPUT", "OUTPUT"] {bout} source_input: "INPUT" }} ]',
            ["target output name 'OUTPUT' can only be specified once"]),
        "batch_output_less_source": (f'{BIO_IO} batch_output [ {{ target_name: "OUTPUT" {bout} }} ]',
                                     ["batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0"]),
        "batch_output_many_source": (
            f'{BIO_IO} batch_output [ {{ target_name: "OUTPUT" {bout} source_input: ["INPUT", "INPUT"] }} ]',
            ["batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 2"]),
        "batch_output_unknown_source": (
            f'{BIO_IO} batch_output [ {{ target_name: "OUTPUT" {bout} source_input: "UNKNOWN_INPUT" }} ]',
            ["unknown source input name 'UNKNOWN_INPUT'"]),
        "batch_output_unknown_target": (
            f'{BIO_IO} batch_output [ {{ target_name: "UNKNOWN_OUTPUT" {bout} source_input: "INPUT" }} ]',
            ["unknown target output name 'UNKNOWN_OUTPUT'"]),
        "control_kind_end_multiple": (
            _control(("START", "START", True), ("READY", "READY", True), ("END0", "END", True), ("END1", "END", True)),
            ["sequence batching specifies multiple CONTROL_SEQUENCE_END tensors for {m}"]),
        "control_kind_ready_multiple": (
            _control(("START", "START", True), ("READY0", "READY", True), ("READY1", "READY", True)),
            ["sequence batching specifies multiple CONTROL_SEQUENCE_READY tensors for {m}"]),
        "control_kind_start_multiple": (
            _control(("START", "START", True), ("READY", "START", True)),
            ["sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for {m}"]),
        "control_tensor_multiple": (
            _control(("START", "START", True), ("START", "READY", True)),
            ["sequence batching control tensor 'START' is specified for multiple control kinds for {m}"]),
        "control_tensor_no_value": (
            _control(("START", "START", True), ("READY", "READY", False)),
            ["sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' "
             "for CONTROL_SEQUENCE_READY for {m}"]),
        "default_priority_level0": ("max_batch_size: 8 dynamic_batching { priority_levels: 3 } " + SEQ_IO,
                                    ["default priority level must be in range [1, 3] for {m}"]),
        "default_priority_level1": (
            "max_batch_size: 8 dynamic_batching { priority_levels: 3 default_priority_level: 5 } " + SEQ_IO,
            ["default priority level must be in range [1, 3] for {m}"]),
        "ensemble_scheduling_set": (
            'max_batch_size: 8 ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" '
            'value: "data" } output_map { key: "y" value: "prob" } } ] } ' + IMG_IO,
            ["ensemble scheduling cannot be set for model '{m}' whose platform is not ensemble"]),
        "invalid_cpu": ("max_batch_size: 8 " + IMG_IO + " instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
                        ["instance group {m}_0 of model {m} has kind KIND_CPU but specifies one or more GPUs"]),
        "invalid_gpu": ("max_batch_size: 8 " + IMG_IO + " instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]",
                        ["instance group {m}_0 of model {m} specifies invalid or unsupported gpu id 42. GPUs with at "
                         "least the minimum required CUDA compute compatibility"]),
        "missing_datatype": (
            'max_batch_size: 4 input [ { name: "input" dims: [ 2, -1 ] } ] '
            'output [ { name: "output" data_type: TYPE_FP32 dims: [ 1 ] } ]',
            ["model input 'input' must specify 'data_type'"]),
        # On a GPU machine group 0 resolves to KIND_GPU and group 1 (gpu -1) is refused; without a
        # GPU, group 0 resolves to KIND_CPU and keeps its gpu 0, and Triton refuses that first.
        "negative_gpu": (
            "max_batch_size: 1 " + IMG_IO + " instance_group [ { gpus: [ 0 ] } ] "
            "instance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]",
            ["instance group {m}_1 of model {m} specifies invalid or unsupported gpu id -1. GPUs with at least the "
             "minimum required CUDA compute compatibility",
             "instance group {m}_0 of model {m} has kind KIND_CPU but specifies one or more GPUs"]),
        "negative_max_batch_size": ("max_batch_size: -2 " + IMG_IO,
                                    ["'max_batch_size' must be non-negative value for {m}"]),
        "preserve_ordering0": (
            "max_batch_size: 8 dynamic_batching { preserve_ordering: true priority_levels: 3 default_priority_level: 2 "
            "priority_queue_policy { key: 1 value: { } } } " + SEQ_IO,
            ["Only one priority level is allowed when 'preserve_ordering' is true for {m}"]),
        "preserve_ordering1": (
            "max_batch_size: 8 dynamic_batching { preserve_ordering: true default_queue_policy { timeout_action: DELAY "
            "default_timeout_microseconds: 1000 } } " + SEQ_IO,
            ["Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {m}"]),
        "preserve_ordering2": (
            "max_batch_size: 8 dynamic_batching { preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
            "priority_queue_policy { key: 1 value: { timeout_action: DELAY default_timeout_microseconds: 1000 } } } "
            + SEQ_IO,
            ["Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {m}"]),
    })  # fmt: skip
    for i, key in enumerate((0, 4)):
        cases[f"priority_level{i}"] = (
            "max_batch_size: 8 dynamic_batching { priority_levels: 3 default_priority_level: 2 "
            f"priority_queue_policy {{ key: {key} value: {{ }} }} }} " + SEQ_IO,
            ["priority queue policy must have priority level in range [1, 3] for {m}"],
        )
    reshapes = [  # (case, kind, dims, shape, sentence)
        ("elementcount0", "input", "1, 3, 2", "5", DIFFERENT_SIZE),
        ("elementcount1", "input", "15", "2, 1, 5", DIFFERENT_SIZE),
        ("elementcount2", "output", "1, 3, 2", "3", DIFFERENT_SIZE),
        ("elementcount3", "output", "15", "3, 2, 5", DIFFERENT_SIZE),
        ("variable0", "input", "2, -1", "2, 2", DIFFERENT_SIZE),
        ("variable1", "output", "2, -1", "2, 2", DIFFERENT_SIZE),
        ("variable2", "input", "2, -1", "2, -1, 2", DIFFERENT_SIZE),
        ("variable3", "output", "2, -1", "1, -1, 2", DIFFERENT_SIZE),
        ("variable4", "input", "2, -1", "2, -1, -1", VARIABLE_DIMS),
        ("variable5", "output", "2, -1", "2, -1, -1", VARIABLE_DIMS),
        ("zerodims0", "input", "2, 2", "0", RESHAPE_ZERO),
        ("zerodims1", "output", "2, 2", "0", RESHAPE_ZERO),
    ]
    for case, kind, dims, shape, sentence in reshapes:
        text = sentence.format(kind) + " for {m}"
        cases[f"reshape_{case}"] = (_reshape(kind, 4, dims, shape), [text])
        if not case.startswith("elementcount"):  # Triton's QA has no non-batching elementcount cases
            cases[f"reshape_nobatch_{case}"] = (_reshape(kind, 0, dims, shape), [text])
    for i, kind in enumerate(("input", "output")):
        cases[f"reshape_nobatch_empty{i}"] = (
            _reshape(kind, 0, "1", ""),
            [f"model {kind} '{kind}' cannot have empty reshape for non-batching model as scalar tensors are not "
             "supported for {m}"],
        )  # fmt: skip
    for kind, variants in (("input", ("1, 0, 28", "0")), ("output", ("1, 1, 0", "0"))):
        for i, dims in enumerate(variants):
            cases[f"zerodims_{kind}{i}"] = (
                _dims(kind, dims),
                [f"model {kind} '{kind}' dimension must be integer >= 1, or -1 to indicate a variable-size dimension "
                 "for {m}"],
            )  # fmt: skip
    return cases


NOAUTOFILL = _noautofill()

# -- autofill_noplatform: errors at auto-complete and at load (--strict-model-config=false) ---------

UNBATCHED, BATCHED = "unbatched", "batched"
PY_DEFAULT = _py()
AUTOFILL: dict[str, tuple[str, str | None, list[str]]] = {  # case -> (config.pbtxt, model, sentences)
    "no_version": ('max_batch_size: 1 ' + _io([("input", "TYPE_FP32", "16")], [("output", "TYPE_FP32", "16")]), None,
                   ["Invalid model name: Could not determine backend for model '{m}' with no backend in model "
                    "configuration. Expected model name of the form 'model.<backend_name>'."]),
    "bad_input_dims": (
        "max_batch_size: 1 " + ONNX_IO.replace('"INPUT0" data_type: TYPE_INT32 dims: [ 16 ]',
                                               '"INPUT0" data_type: TYPE_INT32 dims: [ 16, 1 ]'), BATCHED,
        ["model '{m}', tensor 'INPUT0': the model expects 2 dimensions (shape [-1,16]) but the model configuration "
         "specifies 3 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit "
         "tensor shape, making complete shape [-1,16,1])"]),
    "bad_max_batch_size": (
        "max_batch_size: 1 " + _io([("INPUT0", "TYPE_INT32", "16"), ("INPUT1", "TYPE_INT32", "16")], []), UNBATCHED,
        ["autofill failed for model '{m}': model does not support batching while non-zero max_batch_size is "
         "specified"]),
    "bad_output_dims": (
        "max_batch_size: 1 " + ONNX_IO.replace('"OUTPUT1" data_type: TYPE_INT8 dims: [ 16 ]',
                                               '"OUTPUT1" data_type: TYPE_INT8 dims: [ 1 ]'), BATCHED,
        ["model '{m}', tensor 'OUTPUT1': the model expects 2 dimensions (shape [-1,16]) but the model configuration "
         "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the explicit "
         "tensor shape, making complete shape [-1,1])"]),
    "too_few_inputs": ("max_batch_size: 1 " + ONNX_IO.replace('{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, ',
                                                              ""), BATCHED,
                       ["unable to load model '{m}', configuration expects 1 inputs, model provides 2"]),
    "too_many_inputs": ("max_batch_size: 1 " + ONNX_IO.replace(
        "dims: [ 16 ] } ] output", 'dims: [ 16 ] }, { name: "INPUT_EXTRA" data_type: TYPE_INT32 dims: [ 16 ] } ] output'),
        BATCHED, ["unable to load model '{m}', configuration expects 3 inputs, model provides 2"]),
    "unknown_input": ("max_batch_size: 1 " + ONNX_IO.replace('"INPUT1"', '"INPUT_UNKNOWN"'), BATCHED,
                      ["unexpected inference input 'INPUT_UNKNOWN', allowed inputs are: INPUT0, INPUT1"]),
    "unknown_output": (
        "max_batch_size: 1 " + _io([("INPUT0", "TYPE_INT32", "16"), ("INPUT1", "TYPE_INT32", "16")],
                                   [("OUTPUT_UNKNOWN", "TYPE_INT8", "16")]), BATCHED,
        ["unexpected inference output 'OUTPUT_UNKNOWN', allowed outputs are: OUTPUT0, OUTPUT1"]),
    "conflicting_max_batch_size": ("max_batch_size: 6 " + PY_IO, _py(4),
                                   ["configuration specified max_batch_size 6, but in auto-complete-config function for "
                                    "model '{m}' specified max_batch_size 4"]),
    "conflicting_scheduler_sequence": (
        PY_IO + " sequence_batching: { }", _py(4, calls="c.set_dynamic_batching()"),
        ["Configuration specified scheduling_choice as 'sequence_batching', but auto-complete-config function for "
         "model '{m}' tries to set scheduling_choice as 'dynamic_batching'"]),
    "input_mismatch_datatype": (PY_IO.replace('"INPUT1" data_type: TYPE_FP32', '"INPUT1" data_type: TYPE_INT32'),
                                PY_DEFAULT,
                                ["unable to load model '{m}', configuration expects datatype TYPE_INT32 for input "
                                 "'INPUT1', model provides TYPE_FP32"]),
    "input_mismatch_dims": (PY_IO.replace('"INPUT1" data_type: TYPE_FP32 dims: [ 4 ]',
                                          '"INPUT1" data_type: TYPE_FP32 dims: [ 16 ]'), PY_DEFAULT,
                            ["model '{m}', tensor 'INPUT1': the model expects dims [4] but the model configuration "
                             "specifies dims [16]"]),
    "input_missing_datatype": (PY_IO, _py(inputs=['{"name": "INPUT0", "dims": [4]}', TWO_IN[1]]),
                               ["input 'INPUT0' in auto-complete-config function for model '{m}' is missing "
                                "'data_type' property."]),
    "input_missing_dims": (PY_IO, _py(inputs=[TWO_IN[0], '{"name": "INPUT1", "data_type": "TYPE_FP32"}']),
                           ["input 'INPUT1' in auto-complete-config function for model '{m}' is missing 'dims' "
                            "property."]),
    "input_missing_name": (PY_IO, _py(inputs=[TWO_IN[0], f"{{{F32_4}}}"]),
                           ["input in auto-complete-config function for model '{m}' is missing 'name' property."]),
    "input_wrong_property": (PY_IO, _py(inputs=[TWO_IN[0], f'{{"name": "INPUT1", {F32_4}, "is_shape_tensor:": True}}']),
                             ["input 'INPUT1' in auto-complete-config function for model '{m}' contains property "
                              "other than 'name', 'data_type', 'dims' and 'optional'."]),
    "model_transaction_policy_invalid_args": (
        PY_IO, _py(4, calls='c.set_model_transaction_policy({"invalid": "argument"})'),
        ["model transaction property in auto-complete-config function for model '{m}' contains property other than "
         "'decoupled'"]),
    "model_transaction_policy_mismatch": (
        "model_transaction_policy { decoupled: false } " + PY_IO,
        _py(4, calls="c.set_model_transaction_policy(dict(decoupled=True))"),
        ["trying to change decoupled property in auto-complete-config for model '{m}', which is already set to "
         "'False'"]),
    "no_return": (PY_IO, _py(returns=False),
                  ["auto_complete_config function in model '{m}' must return a valid pb.ModelConfig object."]),
    "output_mismatch_datatype": (PY_IO.replace('"OUTPUT0" data_type: TYPE_FP32', '"OUTPUT0" data_type: TYPE_INT32'),
                                 PY_DEFAULT,
                                 ["unable to load model '{m}', configuration expects datatype TYPE_INT32 for output "
                                  "'OUTPUT0', model provides TYPE_FP32"]),
    "output_mismatch_dims": (PY_IO.replace('"OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ]',
                                           '"OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ]'), PY_DEFAULT,
                             ["model '{m}', tensor 'OUTPUT1': the model expects dims [4] but the model configuration "
                              "specifies dims [16]"]),
    "output_missing_datatype": (PY_IO, _py(outputs=['{"name": "OUTPUT0", "dims": [4]}', TWO_OUT[1]]),
                                ["output 'OUTPUT0' in auto-complete-config function for model '{m}' is missing "
                                 "'data_type' property."]),
    "output_missing_dims": (PY_IO, _py(outputs=[TWO_OUT[0], '{"name": "OUTPUT1", "data_type": "TYPE_FP32"}']),
                            ["output 'OUTPUT1' in auto-complete-config function for model '{m}' is missing 'dims' "
                             "property."]),
    "output_missing_name": (PY_IO, _py(outputs=[TWO_OUT[0], f"{{{F32_4}}}"]),
                            ["output in auto-complete-config function for model '{m}' is missing 'name' property."]),
    "output_wrong_property": (PY_IO, _py(outputs=[TWO_OUT[0], f'{{"name": "OUTPUT1", {F32_4}, "is_shape_tensor:": True}}']),
                              ["output 'OUTPUT1' in auto-complete-config function for model '{m}' contains property "
                               "other than 'name', 'data_type' and 'dims'."]),
}  # fmt: skip

# special_cases/invalid_platform, run with --disable-auto-complete-config (with the noautofill set)
INVALID_PLATFORM = (
    'platform: "onnxruntim" default_model_filename: "model.onnx" max_batch_size: 8 '
    + _io([("INPUT0", "TYPE_INT32", "16"), ("INPUT1", "TYPE_INT32", "16")], [("OUTPUT0", "TYPE_INT8", "16")]),
    ["unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime"],
)


# -- autofill_noplatform_success: the auto-completed configs ---------------------------------------


def _python_expected(name: str, inputs: list[str] = ("INPUT0", "INPUT1"), outputs: list[str] = ("OUTPUT0", "OUTPUT1"),
                     max_batch_size: int = 0, extra: str = "", optional: str = "") -> mc.ModelConfig:  # fmt: skip
    """What Triton 2.51 (no GPU) completes for a Python model of FP32 [4] tensors."""
    ios = "".join(f'input {{ name: "{n}" data_type: TYPE_FP32 dims: 4{" optional: true" if n == optional else ""} }} '
                  for n in inputs)  # fmt: skip
    ios += "".join(f'output {{ name: "{n}" data_type: TYPE_FP32 dims: 4 }} ' for n in outputs)
    return text_format.Parse(
        f'name: "{name}" version_policy {{ latest {{ num_versions: 1 }} }} max_batch_size: {max_batch_size} {ios}'
        f'instance_group {{ name: "{name}" count: 1 kind: KIND_CPU }} default_model_filename: "model.py" '
        "optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } } "
        f'backend: "python" {extra}',
        mc.ModelConfig(),
    )


def _onnx_expected(name: str, batching: bool = True) -> mc.ModelConfig:
    """What Triton completes for the add/sub ONNX graph (KIND_CPU: 2 instances for onnxruntime)."""
    ios = "".join(f'input {{ name: "{n}" data_type: TYPE_INT32 dims: 16 }} ' for n in ("INPUT0", "INPUT1"))
    ios += "".join(f'output {{ name: "{n}" data_type: TYPE_INT8 dims: 16 }} ' for n in ("OUTPUT0", "OUTPUT1"))
    group = f"{name}_0" if not batching else name
    batch = "max_batch_size: 4 dynamic_batching { preferred_batch_size: 4 } " if batching else ""
    return text_format.Parse(
        f'name: "{name}" platform: "onnxruntime_onnx" version_policy {{ latest {{ num_versions: 1 }} }} {batch}{ios}'
        f'instance_group {{ name: "{group}" count: 2 kind: KIND_CPU }} default_model_filename: "model.onnx" '
        "optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } } "
        'backend: "onnxruntime"',
        mc.ModelConfig(),
    )


DYN4 = "dynamic_batching { preferred_batch_size: 4 }"
ONE_IO = _io([("INPUT0", "TYPE_FP32", "4")], [("OUTPUT0", "TYPE_FP32", "4")])
STEP_PY = _py(4, [TWO_IN[0]], [TWO_OUT[0]], calls="c.set_dynamic_batching()")
# case -> (config.pbtxt or None for none, model: python source / BATCHED / UNBATCHED / "fp16", expected)
SUCCESS: dict[str, tuple[str | None, str, mc.ModelConfig]] = {
    "onnx_empty_config": ("", BATCHED, _onnx_expected("onnx_empty_config")),
    "onnx_no_config": (None, BATCHED, _onnx_expected("onnx_no_config")),
    "no_config_no_batch": ("instance_group [ { kind: KIND_CPU } ]", UNBATCHED,
                           _onnx_expected("no_config_no_batch", batching=False)),
    "cpu_instance": (
        'platform: "onnxruntime_onnx" max_batch_size: 8 version_policy: { latest { num_versions: 1 } } '
        + _io([("INPUT0", "TYPE_FP16", "-1, -1")], [("OUTPUT0", "TYPE_FP16", "-1, -1")])
        + ' instance_group { name: "cpu_instance" kind: KIND_CPU }', "fp16",
        text_format.Parse(
            'name: "cpu_instance" platform: "onnxruntime_onnx" version_policy { latest { num_versions: 1 } } '
            'max_batch_size: 8 input { name: "INPUT0" data_type: TYPE_FP16 dims: [-1, -1] } '
            'output { name: "OUTPUT0" data_type: TYPE_FP16 dims: [-1, -1] } '
            'instance_group { name: "cpu_instance" count: 2 kind: KIND_CPU } default_model_filename: "model.onnx" '
            'optimization { input_pinned_memory { enable: true } output_pinned_memory { enable: true } } '
            'backend: "onnxruntime"', mc.ModelConfig())),
    "dynamic_batching": (PY_IO, _py(4, calls="c.set_dynamic_batching()"),
                         _python_expected("dynamic_batching", max_batch_size=4, extra=DYN4)),
    "dynamic_batching_no_op": ("max_batch_size: 4 " + PY_IO + " dynamic_batching: { preferred_batch_size: [ 4 ] }",
                               _py(4, calls="c.set_dynamic_batching()"),
                               _python_expected("dynamic_batching_no_op", max_batch_size=4, extra=DYN4)),
    "empty_config": ("", PY_DEFAULT, _python_expected("empty_config")),
    "incomplete_input": (_io([("INPUT1", "TYPE_FP32", "4")], []), PY_DEFAULT,
                         _python_expected("incomplete_input", inputs=["INPUT1", "INPUT0"])),
    "incomplete_output": (_io([], [("OUTPUT0", "TYPE_FP32", ""), ("OUTPUT1", "", "4")]), PY_DEFAULT,
                          _python_expected("incomplete_output")),
    "model_transaction_policy": (PY_IO, _py(4, calls="c.set_model_transaction_policy(dict(decoupled=True))"),
                                 _python_expected("model_transaction_policy", max_batch_size=4,
                                                  extra="model_transaction_policy { decoupled: true }")),
    "model_transaction_policy_decoupled_false": (
        PY_IO, _py(4, calls="c.set_model_transaction_policy(dict(decoupled=False))"),
        _python_expected("model_transaction_policy_decoupled_false", max_batch_size=4,
                         extra="model_transaction_policy { }")),
    "model_transaction_policy_no_op": (
        "model_transaction_policy { decoupled: true } " + PY_IO,
        _py(4, calls="c.set_model_transaction_policy(dict(decoupled=True))"),
        _python_expected("model_transaction_policy_no_op", max_batch_size=4,
                         extra="model_transaction_policy { decoupled: true }")),
    "optional_input": (_io([("INPUT1", "TYPE_FP32", "4")], []),
                       _py(inputs=[f'{{"name": "INPUT0", {F32_4}, "optional": True}}', TWO_IN[1]]),
                       _python_expected("optional_input", inputs=["INPUT1", "INPUT0"], optional="INPUT0")),
    "unknown_input": (_io([("INPUT0", "TYPE_FP32", "4"), ("INPUT_UNKNOWN", "TYPE_FP32", "4")],
                          [("OUTPUT0", "TYPE_FP32", "4"), ("OUTPUT1", "TYPE_FP32", "4")]), PY_DEFAULT,
                      _python_expected("unknown_input", inputs=["INPUT0", "INPUT_UNKNOWN", "INPUT1"])),
    "unknown_output": (_io([("INPUT0", "TYPE_FP32", "4"), ("INPUT1", "TYPE_FP32", "4")],
                           [("OUTPUT_UNKNOWN", "TYPE_FP32", "4"), ("OUTPUT1", "TYPE_FP32", "4")]), PY_DEFAULT,
                       _python_expected("unknown_output", outputs=["OUTPUT_UNKNOWN", "OUTPUT1", "OUTPUT0"])),
    # conflicting_scheduler_ensemble: the steps' auto_complete_config may set dynamic batching
    "ensemble_first_step": (ONE_IO, STEP_PY, _python_expected("ensemble_first_step", ["INPUT0"], ["OUTPUT0"], 4,
                                                              DYN4)),
    "ensemble_second_step": (ONE_IO, STEP_PY, _python_expected("ensemble_second_step", ["INPUT0"], ["OUTPUT0"], 4,
                                                               DYN4)),
}  # fmt: skip

# -- running the cases ----------------------------------------------------------------------------


def _write_model(root: Path, name: str, config: str | None, model: str | None) -> None:
    d = root / name
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    if model is None:
        return
    (d / "1").mkdir()
    if model in (BATCHED, UNBATCHED):
        (d / "1" / "model.onnx").write_bytes(_add_sub_onnx(model == BATCHED))
    elif model == "fp16":
        (d / "1" / "model.onnx").write_bytes(_identity_fp16_onnx())
    else:
        (d / "1" / "model.py").write_text(model)


def _serve_until_loaded(repo: Path, args: list[str]) -> tuple[ServerProcess, str]:
    """Start a server on ``repo``, wait until no model is loading; returns it and its log so far."""
    srv = ServerProcess([repo], [*args, "--exit-on-error=false"]).start(wait_ready=False)
    srv.wait_live(120)
    deadline = time.monotonic() + 120
    url = f"http://{srv.http_url}/v2/repository/index"
    while True:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=10) as r:
            index = json.loads(r.read())
        if all(m.get("state") in ("READY", "UNAVAILABLE") for m in index) or time.monotonic() > deadline:
            return srv, srv.log_path.read_text(errors="replace")
        time.sleep(0.2)


ERROR_LINE = re.compile(r"^E\d{4} ")


def _found(log: str, sentences: list[str], model: str) -> bool:
    """test.sh's check: an error line (``^E[0-9]{4}``) holding one of the expected sentences."""
    lines = [ln for ln in log.splitlines() if ERROR_LINE.match(ln)]
    return any(s.replace("{m}", model) in ln for s in sentences for ln in lines)


def _failure_run(root: Path, cases: dict[str, tuple[str, str | None, list[str]]], args: list[str]) -> str:
    root.mkdir()
    for name, (config, model, _) in cases.items():
        _write_model(root, name, config, model)
    srv, _ = _serve_until_loaded(root, args)
    srv.stop()
    return srv.log_path.read_text(errors="replace")


NOAUTOFILL_CASES = {n: (c + ' platform: "onnxruntime_onnx"', None, s) for n, (c, s) in NOAUTOFILL.items()}
for _n in ("invalid_cpu", "invalid_gpu", "negative_gpu"):  # test.sh gives these a version directory
    NOAUTOFILL_CASES[_n] = (NOAUTOFILL_CASES[_n][0], BATCHED, NOAUTOFILL_CASES[_n][2])
MODES = {"strict": ["--strict-model-config=true"], "disable": ["--disable-auto-complete-config"]}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The log of each server run: noautofill cases in both modes (invalid_platform in the
    --disable-auto-complete-config one, as test.sh runs it), autofill cases with auto-complete on."""
    root = tmp_path_factory.mktemp("l0_model_config")
    out = {}
    for mode, args in MODES.items():
        cases = dict(NOAUTOFILL_CASES)
        if mode == "disable":
            cases["invalid_platform"] = (INVALID_PLATFORM[0], BATCHED, INVALID_PLATFORM[1])
        out[mode] = _failure_run(root / mode, cases, args)
    out["autofill"] = _failure_run(root / "autofill", AUTOFILL, ["--strict-model-config=false"])
    return out


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", sorted(NOAUTOFILL))
def test_noautofill_platform(logs: dict[str, str], mode: str, case: str) -> None:
    assert _found(logs[mode], NOAUTOFILL[case][1], case), f"{case}: none of {NOAUTOFILL[case][1]} in an error line"


def test_special_case_invalid_platform(logs: dict[str, str]) -> None:
    assert _found(logs["disable"], INVALID_PLATFORM[1], "invalid_platform")


@pytest.mark.parametrize("case", sorted(AUTOFILL))
def test_autofill_noplatform(logs: dict[str, str], case: str) -> None:
    assert _found(logs["autofill"], AUTOFILL[case][2], case), f"{case}: none of {AUTOFILL[case][2]} in an error line"


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("l0_success") / "models"
    root.mkdir()
    for name, (config, model, _) in SUCCESS.items():
        _write_model(root, name, config, model)
    srv, _ = _serve_until_loaded(root, ["--strict-model-config=false"])
    yield srv
    srv.stop()


@pytest.mark.parametrize("case", sorted(SUCCESS))
def test_autofill_noplatform_success(completed: ServerProcess, case: str) -> None:
    """compare_status.py's check (gRPC ModelConfig equality); the HTTP JSON holds the same config,
    its keys in Triton's order."""
    expected = SUCCESS[case][2]
    with grpcclient.InferenceServerClient(completed.grpc_url) as client:
        got = client.get_model_config(case).config
    assert got == expected, f"{case}:\n{text_format.MessageToString(got)}\nexpected:\n{expected}"
    as_json = httpclient.InferenceServerClient(completed.http_url).get_model_config(case)
    assert json_format.ParseDict(as_json, mc.ModelConfig(), ignore_unknown_fields=True) == expected
    assert list(as_json)[:6] == ["name", "platform", "backend", "runtime", "version_policy", "max_batch_size"]
