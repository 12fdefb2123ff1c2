"""One FIL instance: predicts a batch and applies FIL's post-processing of classifier scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from inferd.api import ArrayInstance

if TYPE_CHECKING:
    from inferd.api import ModelLoadContext
    from inferd_backend_fil.options import FilOptions
    from inferd_backend_fil.predictors import Predictor

#: FIL's one input (FP32, ``[num_features]``) and one output (FP32).
INPUT_NAME = "input__0"
OUTPUT_NAME = "output__0"


class FilInstance(ArrayInstance):
    """Predicts with ``predictor``; ``pair``: a binary model's probabilities as ``[1 - p, p]``."""

    def __init__(self, context: ModelLoadContext, predictor: Predictor, options: FilOptions, pair: bool) -> None:
        super().__init__(context.name, context.version, context.config.max_batch_size)
        self.predictor = predictor
        self.classes = options.is_classifier and not options.predict_proba
        self.threshold = np.float32(options.threshold)
        self.multiclass = predictor.task == "multiclass"
        self.pair = pair

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        scores = self.predictor.scores(inputs[INPUT_NAME])
        if self.classes:
            if self.multiclass:
                out = scores.argmax(axis=1).astype(np.float32).reshape(-1, 1)
            else:
                out = (scores > self.threshold).astype(np.float32)
        elif self.pair:
            out = np.concatenate([1.0 - scores, scores], axis=1, dtype=np.float32)
        else:
            out = scores
        return {OUTPUT_NAME: out}
