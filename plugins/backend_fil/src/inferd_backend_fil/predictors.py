"""Tree-model predictors: XGBoost boosters (xgboost) and LightGBM / Treelite models (treelite).

Each gives ``scores(x)``: what RAPIDS FIL computes before its classifier post-processing, as a
float32 ``(rows, width)`` array: values for regressors, the positive-class probability for binary
classifiers, class probabilities for multi-class ones. Both libraries release the GIL while
predicting.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import xgboost

from inferd.api import InvalidArgument

# XGBoost falls back to a DMatrix copy when a GPU booster gets host (numpy) data; that is expected here.
warnings.filterwarnings("ignore", message=".*Falling back to prediction using DMatrix due to mismatched devices")

_TREELITE_TASKS = {0: "binary", 1: "regressor", 2: "multiclass", 3: "ranker", 4: "isolation forest"}


class Predictor:
    """The facts FIL's configuration depends on, and the prediction itself."""

    framework = ""
    num_features = 0
    #: Classes for multi-class classifiers, 1 otherwise (FIL's convention: binary counts as 1).
    num_classes = 1
    #: Columns of ``scores``: num_classes for multi-class, targets for multi-target regression, else 1.
    width = 1
    task = "regressor"

    def scores(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def for_device(self, device: str) -> Predictor:
        """A predictor for ``device`` ("cpu" or "cuda:N"); the same object when nothing changes."""
        return self


class XGBoostPredictor(Predictor):
    """An ``xgboost.Booster`` predicting with ``inplace_predict``."""

    framework = "XGBoost"

    def __init__(self, booster: Any, nthread: int = -1) -> None:
        self.booster = booster
        config = json.loads(booster.save_config())["learner"]
        self.objective = str(config["objective"]["name"])
        params = config["learner_model_param"]
        self.num_features = int(booster.num_features())
        classes = int(params.get("num_class", "0") or 0)
        targets = int(params.get("num_target", "1") or 1)
        if self.objective.startswith("multi:"):
            self.task, self.num_classes, self.width = "multiclass", max(classes, 1), max(classes, 1)
        elif self.objective.startswith("binary:"):
            self.task = "binary"
        else:
            self.task, self.width = "regressor", max(targets, 1)
        if nthread > 0:
            booster.set_param({"nthread": nthread})

    def scores(self, x: np.ndarray) -> np.ndarray:
        if self.objective == "multi:softmax":  # predicts labels; FIL returns probabilities (softmax of margins)
            return softmax(self.booster.inplace_predict(x, predict_type="margin"))
        out = self.booster.inplace_predict(x)
        return np.asarray(out, dtype=np.float32).reshape(x.shape[0], -1)

    def for_device(self, device: str) -> Predictor:
        if device == "cpu":
            return self
        copy = self.booster.copy()
        copy.set_param({"device": device})
        return _check_gpu(XGBoostPredictor(copy), device, self.num_features)


def _check_gpu(predictor: XGBoostPredictor, device: str, num_features: int) -> XGBoostPredictor:
    """XGBoost silently predicts on the CPU when it has no GPU: make that a clear error instead."""
    if not xgboost.build_info().get("USE_CUDA", False):
        raise InvalidArgument(
            f"KIND_GPU needs an XGBoost built with CUDA; this one (xgboost {xgboost.__version__}) is CPU-only. "
            f"Install the 'xgboost' package (not 'xgboost-cpu') or use instance_group [{{ kind: KIND_CPU }}]"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predictor.booster.inplace_predict(np.zeros((1, num_features), np.float32))
    if any("Device is changed from GPU to CPU" in str(w.message) for w in caught):
        raise InvalidArgument(f"KIND_GPU asks for {device}, but XGBoost finds no usable GPU")
    return predictor


class TreelitePredictor(Predictor):
    """A Treelite model (from LightGBM text or a checkpoint) predicting with ``treelite.gtil``."""

    framework = "Treelite"
    identity = False

    def __init__(self, model: Any, gtil: Any, nthread: int = -1) -> None:
        self.model = model
        self.gtil = gtil
        self.nthread = nthread if nthread > 0 else -1
        header = model.get_header_accessor()
        self.num_features = int(model.num_feature)
        self.task = _TREELITE_TASKS.get(int(header.get_field("task_type")[0]), "regressor")
        self.postprocessor = str(header.get_field("postprocessor"))
        leaf_vector = [int(v) for v in header.get_field("leaf_vector_shape")]
        classes = max(int(c) for c in header.get_field("num_class"))
        targets = int(header.get_field("num_target")[0])
        self.margin_softmax = False
        if self.task == "multiclass":
            self.num_classes = self.width = classes
            # FIL makes multi-class models output probabilities: softmax of per-class margins, or the
            # leaf vectors as they are (random forests).
            self.margin_softmax = leaf_vector[1] == 1 and self.postprocessor != "softmax"
            self.identity = leaf_vector[1] > 1
        else:
            self.width = max(targets, 1)

    def scores(self, x: np.ndarray) -> np.ndarray:
        margin = self.margin_softmax or (self.task == "multiclass" and self.identity)
        out = self.gtil.predict(self.model, x, nthread=self.nthread, pred_margin=margin)
        out = np.asarray(out, dtype=np.float32).reshape(x.shape[0], -1)
        return softmax(out) if self.margin_softmax else out


def softmax(margins: np.ndarray) -> np.ndarray:
    """Row-wise softmax as float32."""
    z = np.asarray(margins, dtype=np.float32)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    out: np.ndarray = z / z.sum(axis=1, keepdims=True)
    return out


def load_predictor(path: Path, model_type: str, nthread: int, what: str) -> Predictor:
    """Load ``path`` as ``model_type``; ``what`` names the model in errors."""
    if not path.is_file():
        raise InvalidArgument(f"{what}: model file {path} does not exist (model_type '{model_type}')")
    if model_type.startswith("xgboost"):
        return _load_xgboost(path, model_type, nthread, what)
    return _load_treelite(path, model_type, nthread, what)


def _load_xgboost(path: Path, model_type: str, nthread: int, what: str) -> Predictor:
    booster = xgboost.Booster()
    try:
        booster.load_model(bytearray(path.read_bytes()))  # by content: the file name need not say the format
    except xgboost.core.XGBoostError as exc:
        hint = ""
        if model_type == "xgboost":
            hint = (
                f" (model_type 'xgboost' is XGBoost's legacy binary format, which xgboost {xgboost.__version__} "
                f"may no longer read: re-save the model as JSON or UBJSON with an older xgboost and use "
                f"model_type 'xgboost_json' or 'xgboost_ubj')"
            )
        raise InvalidArgument(f"{what}: cannot load XGBoost model {path}: {_first_line(exc)}{hint}") from None
    return XGBoostPredictor(booster, nthread)


def _load_treelite(path: Path, model_type: str, nthread: int, what: str) -> Predictor:
    try:
        import treelite
        import treelite.gtil
    except ImportError:
        raise InvalidArgument(
            f"{what}: model_type '{model_type}' needs the 'treelite' package, which is not installed: "
            f"pip install treelite (or pip install 'inferd-backend-fil[treelite]')"
        ) from None
    try:
        if model_type == "lightgbm":
            model = treelite.frontend.load_lightgbm_model(str(path))
        else:
            model = treelite.Model.deserialize(str(path))
    except Exception as exc:
        raise InvalidArgument(
            f"{what}: cannot load {model_type} model {path} with treelite: {_first_line(exc)}"
        ) from None
    return TreelitePredictor(model, treelite.gtil, nthread)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
