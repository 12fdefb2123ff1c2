"""The "fil" backend: Triton FIL's configuration surface, predicting with XGBoost and Treelite.

One input ``input__0`` (FP32, ``[num_features]``), one output ``output__0`` (FP32): the value
for regressors; for classifiers (``is_classifier``) the class index, or with ``predict_proba``
the class probabilities (``[num_classes]``; binary models give ``[1]``, the positive class, or
``[2]`` when the config declares two columns).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from inferd.api import (
    Backend,
    ConfigError,
    DataType,
    InferdError,
    Instance,
    InstanceSpec,
    InvalidArgument,
    Model,
    ModelLoadContext,
)
from inferd_backend_fil.instance import INPUT_NAME, OUTPUT_NAME, FilInstance
from inferd_backend_fil.options import FilOptions, parse_options
from inferd_backend_fil.predictors import Predictor, load_predictor

log = logging.getLogger("inferd.fil")

#: max_batch_size given to a config that sets none (FIL needs batching; its example uses 32768).
DEFAULT_MAX_BATCH_SIZE = 32768
_FP32 = DataType.Value("TYPE_FP32")


class FilBackend(Backend):
    """Loads XGBoost (json, ubj, legacy binary), LightGBM text and Treelite checkpoint models."""

    name = "fil"
    default_model_filename = "xgboost.model"  # FIL's default model_type is "xgboost"

    def autocomplete_config(self, config: Any, model_dir: Path, version_dir: Path | None) -> None:
        """Fill the model file name for the model_type, and I/O and max_batch_size from the model."""
        name = config.name or model_dir.name
        options = parse_options(config, name)
        if not config.default_model_filename:
            config.default_model_filename = options.default_filename
        if config.input and config.output and config.max_batch_size > 0:
            return
        path = version_dir / config.default_model_filename if version_dir is not None else None
        if path is None or not path.is_file():
            return  # load_model reports the missing file
        predictor = load_predictor(path, options.model_type, options.cpu_nthread, f"model '{name}'")
        if config.max_batch_size <= 0:
            config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        if not config.input:
            config.input.add(name=INPUT_NAME, data_type=_FP32, dims=[predictor.num_features])
        if not config.output:
            config.output.add(name=OUTPUT_NAME, data_type=_FP32, dims=[output_width(predictor, options)])

    def load_model(self, context: ModelLoadContext) -> Model:
        config = context.config
        options = parse_options(config, context.name, report=True)
        what = f"model '{context.name}' version {context.version}"
        predictor = load_predictor(model_file(context, options), options.model_type, options.cpu_nthread, what)
        pair = check_config(context.name, config, predictor, options)
        log.info(
            "%s: %s %s, %d features, %d class(es), is_classifier=%s, predict_proba=%s",
            what,
            predictor.framework,
            predictor.task,
            predictor.num_features,
            predictor.num_classes,
            options.is_classifier,
            options.predict_proba,
        )
        return FilModel(context, predictor, options, pair)


def model_file(context: ModelLoadContext, options: FilOptions) -> Path:
    """The configured file; FIL's per-model_type name when the configured one does not exist."""
    path = context.model_path
    if path.is_file() or path.name == options.default_filename:
        return path
    fallback = context.version_dir / options.default_filename
    return fallback if fallback.is_file() else path


def output_width(predictor: Predictor, options: FilOptions) -> int:
    """Columns of output__0: 1 for a class index, else what the model scores."""
    if options.is_classifier and not options.predict_proba:
        return 1
    return predictor.width


def check_config(model: str, config: Any, predictor: Predictor, options: FilOptions) -> bool:
    """Raise ConfigError where the config disagrees with the model; True for binary ``[2]`` output."""

    def fail(message: str) -> None:
        raise ConfigError(f"model '{model}': {message}")

    if config.max_batch_size <= 0:
        fail("the fil backend needs max_batch_size > 0 (inputs are [batch, num_features])")
    inputs = {t.name: t for t in config.input}
    outputs = {t.name: t for t in config.output}
    if list(inputs) != [INPUT_NAME] or list(outputs) != [OUTPUT_NAME]:
        fail(
            f"the fil backend reads one input '{INPUT_NAME}' and writes one output '{OUTPUT_NAME}'; "
            f"the config declares inputs {list(inputs)} and outputs {list(outputs)}"
        )
    for tensor in (inputs[INPUT_NAME], outputs[OUTPUT_NAME]):
        if tensor.data_type != _FP32:
            fail(f"'{tensor.name}' must be TYPE_FP32, got {DataType.Name(tensor.data_type)}")
    dims = list(inputs[INPUT_NAME].dims)
    if dims not in ([predictor.num_features], [-1]):
        fail(
            f"input '{INPUT_NAME}' has dims {dims}, but the {predictor.framework} model has "
            f"{predictor.num_features} features (expected dims [{predictor.num_features}])"
        )
    width = output_width(predictor, options)
    allowed = [[width], [-1]]
    pair = options.is_classifier and options.predict_proba and predictor.task == "binary"
    if pair:
        allowed.append([2])
    out_dims = list(outputs[OUTPUT_NAME].dims)
    if out_dims not in allowed:
        fail(
            f"output '{OUTPUT_NAME}' has dims {out_dims}, but this {predictor.task} model with "
            f"is_classifier={str(options.is_classifier).lower()} and "
            f"predict_proba={str(options.predict_proba).lower()} gives {' or '.join(map(str, allowed[:1] + allowed[2:]))}"
        )
    return pair and out_dims == [2]


class FilModel(Model):
    """A loaded tree model; CPU instances share it (prediction is thread-safe)."""

    def __init__(self, context: ModelLoadContext, predictor: Predictor, options: FilOptions, pair: bool) -> None:
        self.context = context
        self.name = context.name
        self.predictor = predictor
        self.options = options
        self.pair = pair

    def create_instance(self, spec: InstanceSpec) -> Instance:
        device = f"cuda:{spec.device_id}" if spec.kind == "KIND_GPU" else "cpu"
        if device != "cpu" and not hasattr(self.predictor, "booster"):
            log.warning(
                "model '%s': %s models predict on the CPU; instance '%s' asks for %s",
                self.name,
                self.predictor.framework,
                spec.name,
                device,
            )
            device = "cpu"
        try:
            predictor = self.predictor.for_device(device)
        except InferdError as exc:
            raise InvalidArgument(f"model '{self.name}' instance '{spec.name}': {exc.message}") from None
        return FilInstance(self.context, predictor, self.options, self.pair)
