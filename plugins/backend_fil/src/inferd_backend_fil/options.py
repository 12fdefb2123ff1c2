"""The ``parameters`` of Triton's FIL backend, read once per model (no framework import here)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from inferd.api import ConfigError, ModelParameters

log = logging.getLogger("inferd.fil")

#: model_type -> the file FIL loads from the version directory when the config names none.
DEFAULT_FILENAMES: dict[str, str] = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}

#: RAPIDS FIL tuning that does not change results; inferd predicts with XGBoost / Treelite instead.
_TUNING = ("chunk_size", "layout", "transfer_threshold", "use_experimental_optimizations")
#: Parameters FIL removed in 25.09 (it warns about them, as inferd does).
_REMOVED = {"algo": "layout", "threads_per_tree": "chunk_size", "storage_type": "", "blocks_per_sm": ""}


@dataclass(frozen=True, slots=True)
class FilOptions:
    """What a FIL config asks for. Defaults are FIL's."""

    model_type: str = "xgboost"
    is_classifier: bool = False
    predict_proba: bool = False
    threshold: float = 0.5
    cpu_nthread: int = -1
    xgboost_allow_unknown_field: bool = False

    @property
    def default_filename(self) -> str:
        return DEFAULT_FILENAMES[self.model_type]


def parse_options(config: Any, model: str, report: bool = False) -> FilOptions:
    """Read FIL's parameters; ``report`` logs the ignored and deprecated ones (once, at load)."""
    params = ModelParameters(config, model)
    model_type = params.get("model_type", "xgboost").strip()
    if model_type not in DEFAULT_FILENAMES:
        raise ConfigError(
            f"model '{model}': parameter model_type '{model_type}' is not recognized; expected one of "
            f"{', '.join(DEFAULT_FILENAMES)}"
        )
    if report:
        _report(params, model)
    # "output_class" is the pre-25.09 name; FIL still honours it over is_classifier.
    is_classifier = params.flag("output_class", params.flag("is_classifier", False))
    return FilOptions(
        model_type=model_type,
        is_classifier=is_classifier,
        predict_proba=params.flag("predict_proba", False),
        threshold=params.number("threshold", 0.5),
        cpu_nthread=int(params.number("cpu_nthread", -1)),
        xgboost_allow_unknown_field=params.flag("xgboost_allow_unknown_field", False),
    )


def _report(params: ModelParameters, model: str) -> None:
    if "output_class" in params:
        log.warning("model '%s': the `output_class` parameter was renamed `is_classifier` in FIL 25.09", model)
    for key, replacement in _REMOVED.items():
        if key in params:
            hint = f"; use `{replacement}` instead" if replacement else ""
            log.warning(
                "model '%s': the `%s` parameter was removed from FIL in 25.09 and is ignored%s", model, key, hint
            )
    for key in _TUNING:
        if key in params:
            log.info("model '%s': parameter `%s` tunes RAPIDS FIL on GPUs; inferd ignores it", model, key)
