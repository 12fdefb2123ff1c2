"""Small tree models the tests train on generated data, and FIL's expected outputs computed from them."""

from __future__ import annotations

import numpy as np

from tests.lazy import lazy_import

xgboost = lazy_import("xgboost")  # loaded by the first test that trains a tree, not by collection

NUM_FEATURES = 6
NUM_CLASSES = 3


def data(rows: int = 240, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((rows, NUM_FEATURES), dtype=np.float32)
    return x, x[:, 0] + 2 * x[:, 1] - x[:, 2]


def regressor() -> xgboost.Booster:
    x, y = data()
    return xgboost.train(
        {"objective": "reg:squarederror", "max_depth": 3, "nthread": 1}, xgboost.DMatrix(x, label=y), 8
    )


def binary() -> xgboost.Booster:
    x, y = data()
    label = (y > np.median(y)).astype(np.float32)
    return xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "nthread": 1}, xgboost.DMatrix(x, label=label), 8
    )


def multiclass(objective: str = "multi:softprob") -> xgboost.Booster:
    x, y = data()
    label = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])).astype(np.float32)
    params = {"objective": objective, "num_class": NUM_CLASSES, "max_depth": 3, "nthread": 1}
    return xgboost.train(params, xgboost.DMatrix(x, label=label), 8)


def probabilities(booster: xgboost.Booster, x: np.ndarray) -> np.ndarray:
    """Class probabilities from xgboost itself (softprob values; softmax of margins for multi:softmax)."""
    margins = booster.predict(xgboost.DMatrix(x), output_margin=True)
    if margins.ndim == 1:
        return booster.predict(xgboost.DMatrix(x))
    e = np.exp(margins - margins.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
