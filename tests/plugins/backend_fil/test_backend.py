"""The fil backend run directly (no server): options, FIL's output semantics, auto-complete, errors."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.config import normalize, parse_config_text
from inferd.contracts.backend import InstanceSpec, ModelLoadContext
from inferd.contracts.errors import ConfigError, InvalidArgument
from inferd.contracts.types import InferRequest, InferTensor
from inferd_backend_fil.options import parse_options
from tests.lazy import lazy_import

from . import trees

xgboost = lazy_import("xgboost")
#: The backend module, which imports xgboost and treelite: loaded by the first test that uses it.
fil_backend = lazy_import("inferd_backend_fil.backend")

HAVE_TREELITE = importlib.util.find_spec("treelite") is not None
HAVE_LIGHTGBM = importlib.util.find_spec("lightgbm") is not None


def _params(**values: str) -> str:
    return "\n".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in values.items())


def _config(features: int, width: int, **params: str) -> str:
    return f"""
        backend: "fil"
        max_batch_size: 64
        input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
        output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
        {_params(**params)}
    """


@pytest.fixture
def load(tmp_path: Path) -> Callable[..., Any]:
    """``load(name, writer, config, filename)`` -> one CPU instance; ``writer(path)`` saves the model."""
    opened = []

    def make(name: str, writer: Callable[[Path], None], config: str, filename: str = "xgboost.json",
             autocomplete: bool = False) -> Any:  # fmt: skip
        model_dir = tmp_path / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        writer(model_dir / "1" / filename)
        cfg = parse_config_text(textwrap.dedent(config), str(model_dir / "config.pbtxt"))
        backend = fil_backend.FilBackend()
        if autocomplete:
            backend.autocomplete_config(cfg, model_dir, model_dir / "1")
        normalize(cfg, name, backend.default_model_filename)
        model = backend.load_model(ModelLoadContext(name, 1, cfg, model_dir, model_dir / "1", tmp_path))
        instance = model.create_instance(InstanceSpec(f"{name}_0", "KIND_CPU", 0, 0, name))
        opened.append(instance)
        instance.config = cfg
        return instance

    yield make
    for instance in opened:
        instance.close()


def _run(instance: Any, x: np.ndarray) -> np.ndarray:
    x = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(x.shape)  # read-only, as decoded from the wire
    [response] = instance.execute([InferRequest("m", inputs={"input__0": InferTensor.from_array("input__0", x)})])
    return response.output("output__0").data


X, _ = trees.data(rows=17, seed=7)


def test_options_follow_fil():
    config = parse_config_text(_params(model_type="xgboost_ubj", output_class="true", threshold="0.3"), "x")
    options = parse_options(config, "m")
    assert (options.model_type, options.is_classifier, options.threshold) == ("xgboost_ubj", True, 0.3)
    assert options.default_filename == "xgboost.ubj"
    assert parse_options(parse_config_text("", "x"), "m").default_filename == "xgboost.model"
    with pytest.raises(ConfigError, match="model_type 'onnx' is not recognized"):
        parse_options(parse_config_text(_params(model_type="onnx"), "x"), "m")
    with pytest.raises(ConfigError, match="predict_proba must be true or false"):
        parse_options(parse_config_text(_params(predict_proba="sometimes"), "x"), "m")


def test_regressor_returns_raw_predictions(load):
    booster = trees.regressor()
    instance = load("reg", booster.save_model, _config(6, 1, model_type="xgboost_json"))
    np.testing.assert_allclose(_run(instance, X), booster.inplace_predict(X).reshape(-1, 1), rtol=1e-6)


def test_binary_classes_use_the_threshold(load):
    booster = trees.binary()
    instance = load(
        "bin", booster.save_model, _config(6, 1, model_type="xgboost_json", is_classifier="true", threshold="0.3")
    )
    want = (booster.inplace_predict(X) > 0.3).astype(np.float32).reshape(-1, 1)
    np.testing.assert_array_equal(_run(instance, X), want)


def test_binary_probabilities_one_or_two_columns(load):
    booster = trees.binary()
    p = booster.inplace_predict(X).reshape(-1, 1)
    one = load(
        "bin1", booster.save_model, _config(6, 1, model_type="xgboost_json", is_classifier="true", predict_proba="true")
    )
    np.testing.assert_allclose(_run(one, X), p, rtol=1e-6)
    two = load(
        "bin2", booster.save_model, _config(6, 2, model_type="xgboost_json", is_classifier="true", predict_proba="true")
    )
    np.testing.assert_allclose(_run(two, X), np.hstack([1 - p, p]), rtol=1e-6)


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
def test_multiclass_probabilities_and_classes(load, objective):
    booster = trees.multiclass(objective)
    proba = trees.probabilities(booster, X)
    inst = load(
        "mp", booster.save_model, _config(6, 3, model_type="xgboost_json", is_classifier="true", predict_proba="true")
    )
    np.testing.assert_allclose(_run(inst, X), proba, rtol=1e-5, atol=1e-6)
    inst = load("mc", booster.save_model, _config(6, 1, model_type="xgboost_json", is_classifier="true"))
    np.testing.assert_array_equal(_run(inst, X), proba.argmax(axis=1).reshape(-1, 1).astype(np.float32))


def test_several_requests_in_one_batch(load):
    booster = trees.regressor()
    instance = load("reg", booster.save_model, _config(6, 1, model_type="xgboost_json"))
    parts = [X[:3], X[3:4], X[4:10]]
    requests = [
        InferRequest("m", id=str(i), inputs={"input__0": InferTensor.from_array("input__0", p)})
        for i, p in enumerate(parts)
    ]
    for part, response in zip(parts, instance.execute(requests), strict=True):
        np.testing.assert_allclose(
            response.output("output__0").data, booster.inplace_predict(part).reshape(-1, 1), rtol=1e-6
        )


def test_autocomplete_fills_io_batch_and_filename(load):
    booster = trees.multiclass()
    config = f'backend: "fil"\n{_params(model_type="xgboost_ubj", is_classifier="true", predict_proba="true")}'
    instance = load("auto", booster.save_model, config, filename="xgboost.ubj", autocomplete=True)
    cfg = instance.config
    assert cfg.default_model_filename == "xgboost.ubj"
    assert cfg.max_batch_size == 32768
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("input__0", [6])]
    assert [(t.name, list(t.dims)) for t in cfg.output] == [("output__0", [3])]


def test_wrong_num_features_is_a_load_error(load):
    with pytest.raises(ConfigError, match=r"input 'input__0' has dims \[5\], but the XGBoost model has 6 features"):
        load("bad", trees.regressor().save_model, _config(5, 1, model_type="xgboost_json"))


def test_wrong_output_width_is_a_load_error(load):
    with pytest.raises(ConfigError, match=r"output 'output__0' has dims \[2\].*gives \[3\]"):
        load(
            "bad",
            trees.multiclass().save_model,
            _config(6, 2, model_type="xgboost_json", predict_proba="true", is_classifier="true"),
        )


def test_tensor_names_must_be_fils(load):
    config = _config(6, 1, model_type="xgboost_json").replace('"input__0"', '"features"')
    with pytest.raises(ConfigError, match="reads one input 'input__0'"):
        load("bad", trees.regressor().save_model, config)


def test_corrupt_model_file(load):
    with pytest.raises(InvalidArgument, match="cannot load XGBoost model"):
        load("bad", lambda p: p.write_bytes(b"\x00garbage"), _config(6, 1, model_type="xgboost_json"))


def test_model_file_named_by_config(load):
    config = _config(6, 1, model_type="xgboost_ubj") + '\ndefault_model_filename: "trees.bin"'
    booster = trees.regressor()
    instance = load("named", lambda p: p.write_bytes(booster.save_raw("ubj")), config, filename="trees.bin")
    np.testing.assert_allclose(_run(instance, X), booster.inplace_predict(X).reshape(-1, 1), rtol=1e-6)


def test_lightgbm_without_treelite_says_what_to_install(load, monkeypatch):
    monkeypatch.setitem(sys.modules, "treelite", None)  # as if treelite were not installed
    with pytest.raises(InvalidArgument, match=r"needs the 'treelite' package.*pip install treelite"):
        load("lgb", lambda p: p.write_text("tree\n"), _config(6, 1, model_type="lightgbm"), filename="model.txt")


@pytest.mark.skipif(not (HAVE_TREELITE and HAVE_LIGHTGBM), reason="needs the optional treelite and lightgbm packages")
def test_lightgbm_multiclass_through_treelite(load):
    import lightgbm

    x, y = trees.data()
    label = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    params = {"objective": "multiclass", "num_class": 3, "num_leaves": 7, "verbose": -1, "num_threads": 1}
    booster = lightgbm.train(params, lightgbm.Dataset(x, label), 5)
    config = _config(6, 3, model_type="lightgbm", is_classifier="true", predict_proba="true")
    instance = load("lgb", lambda p: booster.save_model(str(p)), config, filename="model.txt")
    np.testing.assert_allclose(_run(instance, X), booster.predict(X), rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not HAVE_TREELITE, reason="needs the optional treelite package")
def test_treelite_checkpoint_binary_classes(load):
    import treelite

    booster = trees.binary()
    model = treelite.frontend.from_xgboost(booster)
    config = _config(6, 1, model_type="treelite_checkpoint", is_classifier="true")
    instance = load("tl", lambda p: model.serialize(str(p)), config, filename="checkpoint.tl")
    want = (booster.inplace_predict(X) > 0.5).astype(np.float32).reshape(-1, 1)
    np.testing.assert_array_equal(_run(instance, X), want)


def test_hooks_import_no_framework():
    code = (
        "import inferd_backend_fil.hooks, sys; "
        "assert not {'xgboost', 'treelite', 'lightgbm'} & set(sys.modules), 'framework imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_xgboost_is_new_enough():
    assert int(xgboost.__version__.split(".")[0]) >= 2
