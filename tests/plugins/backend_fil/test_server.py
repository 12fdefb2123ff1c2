"""The fil backend behind a real ``inferd serve``, called with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.lazy import lazy_import
from tests.servers import Servers
from tests.triton_clients import both_clients

from . import trees

xgboost = lazy_import("xgboost")


def _config(features: int, width: int, extra: str = "", **params: str) -> str:
    lines = [f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in params.items()]
    return f"""
backend: "fil"
max_batch_size: 256
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
{extra}
""" + "\n".join(lines)


@pytest.fixture(scope="module")
def boosters() -> dict[str, xgboost.Booster]:
    return {"reg": trees.regressor(), "bin": trees.binary(), "multi": trees.multiclass()}


@pytest.fixture(scope="module")
def server(boosters: dict[str, xgboost.Booster], serve: Servers) -> ServerProcess:
    reg, binary, multi = boosters["reg"], boosters["bin"], boosters["multi"]

    def save(booster: xgboost.Booster):
        return lambda path: booster.save_model(str(path))

    repo = {
        "regressor": {"config.pbtxt": _config(6, 1, model_type="xgboost_json"), "1/xgboost.json": save(reg)},
        "binary_class": {
            "config.pbtxt": _config(
                6,
                1,
                "instance_group [ { kind: KIND_CPU count: 2 } ]",
                model_type="xgboost_ubj",
                output_class="true",
                threshold="0.6",
            ),
            "1/xgboost.ubj": save(binary),
        },
        "binary_proba": {
            "config.pbtxt": _config(6, 2, model_type="xgboost_json", is_classifier="true", predict_proba="true"),
            "1/xgboost.json": save(binary),
        },
        "multi_proba": {
            "config.pbtxt": _config(6, 3, model_type="xgboost_ubj", is_classifier="true", predict_proba="true"),
            "1/xgboost.ubj": save(multi),
        },
        "multi_class": {
            "config.pbtxt": _config(6, 1, model_type="xgboost_json", is_classifier="true"),
            "1/xgboost.json": save(multi),
        },
        "auto": {
            "config.pbtxt": 'backend: "fil"\nparameters { key: "model_type" value { string_value: "xgboost_ubj" } }',
            "1/xgboost.ubj": save(reg),
        },
        "wrong_features": {"config.pbtxt": _config(5, 1, model_type="xgboost_json"), "1/xgboost.json": save(reg)},
    }
    return serve(
        repo, "--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false", "--strict-readiness=false"
    )


def _predict(module: Any, client: Any, model: str, x: np.ndarray) -> np.ndarray:
    tensor = module.InferInput("input__0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy("output__0")


X, _ = trees.data(rows=40, seed=3)


def test_regressor_equals_inplace_predict(server: ServerProcess, boosters: dict[str, Any]) -> None:
    want = boosters["reg"].inplace_predict(X).reshape(-1, 1)
    for module, client in both_clients(server):
        np.testing.assert_allclose(_predict(module, client, "regressor", X), want, rtol=1e-6)
        np.testing.assert_allclose(_predict(module, client, "regressor", X[:1]), want[:1], rtol=1e-6)


def test_binary_classes_with_threshold(server: ServerProcess, boosters: dict[str, Any]) -> None:
    p = boosters["bin"].predict(xgboost.DMatrix(X))
    want = (p > 0.6).astype(np.float32).reshape(-1, 1)
    for module, client in both_clients(server):
        np.testing.assert_array_equal(_predict(module, client, "binary_class", X), want)


def test_binary_probabilities_two_columns(server: ServerProcess, boosters: dict[str, Any]) -> None:
    p = boosters["bin"].predict(xgboost.DMatrix(X)).reshape(-1, 1)
    for module, client in both_clients(server):
        np.testing.assert_allclose(
            _predict(module, client, "binary_proba", X), np.hstack([1 - p, p]), rtol=1e-6, atol=1e-7
        )


def test_multiclass_probabilities_and_classes(server: ServerProcess, boosters: dict[str, Any]) -> None:
    proba = trees.probabilities(boosters["multi"], X)
    for module, client in both_clients(server):
        np.testing.assert_allclose(_predict(module, client, "multi_proba", X), proba, rtol=1e-5, atol=1e-7)
        classes = _predict(module, client, "multi_class", X)
        np.testing.assert_array_equal(classes, proba.argmax(axis=1).reshape(-1, 1).astype(np.float32))


def test_autocompleted_config(server: ServerProcess, boosters: dict[str, Any]) -> None:
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("auto")
    assert config["max_batch_size"] == 32768
    assert config["input"][0]["name"] == "input__0" and config["input"][0]["dims"] == [6]
    assert config["output"][0]["name"] == "output__0" and config["output"][0]["dims"] == [1]
    assert config["default_model_filename"] == "xgboost.ubj"
    want = boosters["reg"].inplace_predict(X).reshape(-1, 1)
    np.testing.assert_allclose(
        _predict(httpclient, httpclient.InferenceServerClient(server.http_url), "auto", X), want, rtol=1e-6
    )


def test_wrong_num_features_is_unavailable_with_reason(server: ServerProcess) -> None:
    index = {m["name"]: m for m in httpclient.InferenceServerClient(server.http_url).get_model_repository_index()}
    assert index["wrong_features"]["state"] == "UNAVAILABLE"
    assert "has dims [5], but the XGBoost model has 6 features" in index["wrong_features"]["reason"]
    assert index["regressor"]["state"] == "READY"


def test_wrong_input_shape_is_400_naming_the_tensor(server: ServerProcess) -> None:
    x = X[:, :5].copy()
    with pytest.raises(InferenceServerException) as info:
        _predict(httpclient, httpclient.InferenceServerClient(server.http_url), "regressor", x)
    assert info.value.status() == "400" and "input__0" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        _predict(grpcclient, grpcclient.InferenceServerClient(server.grpc_url), "regressor", x)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT" and "input__0" in info.value.message()
