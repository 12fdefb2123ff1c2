"""``nv_inference_first_response_histogram_ms`` for ordinary (not decoupled) models and per-model
buckets (``model_metrics``), as Triton 2.52+ has them, against a real ``inferd serve``.

Triton observes whole milliseconds (its nanoseconds divided as integers), takes a model's
``histogram_options`` for that family, refuses an incomplete ``metric_control`` with its sentences
and only warns of a family it does not customize.
"""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess
from tests.python_models import source
from tests.servers import Servers

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MS" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "MS_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
BUCKETS = """
model_metrics {
  metric_control [ {
    metric_identifier { family: "nv_inference_first_response_histogram_ms" }
    histogram_options { buckets: [ 20, 1, 1000 ] }
  } ]
}
"""
OTHER_FAMILY = """
model_metrics {
  metric_control [ {
    metric_identifier { family: "nv_inference_request_duration_us" }
    histogram_options { buckets: [ 3 ] }
  } ]
}
"""
# Sleeps MS milliseconds, then echoes it.
SLEEP_PY = source("slow")
INCOMPLETE = {
    "no_identifier": (
        "model_metrics { metric_control [ { histogram_options { buckets: [ 1 ] } } ] }",
        "metric control must specify 'metric_identifier'",
    ),
    "empty_family": (
        'model_metrics { metric_control [ { metric_identifier { family: "" } histogram_options { buckets: [ 1 ] } } ] }',
        "metric identifier must specify non-empty 'family'",
    ),
    "no_options": (
        'model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response_histogram_ms" } } ] }',
        "metric control must specify 'histogram_options'",
    ),
    "no_buckets": (
        'model_metrics { metric_control [ { metric_identifier { family: "nv_inference_first_response_histogram_ms" } '
        "histogram_options { } } ] }",
        "histogram options must specify non-empty 'buckets'",
    ),
}
FAMILY = "nv_inference_first_response_histogram_ms"


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    models = {
        "bucketed": {"config.pbtxt": CONFIG + BUCKETS, "1/model.py": SLEEP_PY},
        "plain": {"config.pbtxt": CONFIG, "1/model.py": SLEEP_PY},
        "other_family": {"config.pbtxt": CONFIG + OTHER_FAMILY, "1/model.py": SLEEP_PY},
    }
    for name, (text, _) in INCOMPLETE.items():
        models[name] = {"config.pbtxt": CONFIG + text, "1/model.py": SLEEP_PY}
    args = ["--metrics-config", "histogram_latencies=true", "--model-control-mode", "explicit"]
    for name in ("bucketed", "plain", "other_family"):
        args += ["--load-model", name]
    return serve(models, *args)


def _histogram(server, model: str) -> dict[str, float]:
    """The family's samples for ``model``: ``le`` bounds, ``sum`` and ``count``."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != FAMILY:
            continue
        assert family.type == "histogram"
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            assert sample.labels["version"] == "1"
            key = sample.labels.get("le") or sample.name.removeprefix(FAMILY + "_")
            out[key] = sample.value
    return out


def _infer(client: httpclient.InferenceServerClient, model: str, ms: float) -> None:
    x = httpclient.InferInput("MS", [1], "FP32")
    x.set_data_from_numpy(np.array([ms], np.float32))
    assert float(client.infer(model, [x]).as_numpy("MS_OUT")[0]) == ms


def test_a_models_buckets_and_whole_milliseconds(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    before = _histogram(server, "bucketed")
    for _ in range(3):
        _infer(client, "bucketed", 25)  # at least 25 ms: above the 1 and 20 buckets
    _infer(client, "bucketed", 0)
    h = _histogram(server, "bucketed")
    assert sorted(k for k in h if k not in ("sum", "count")) == ["+Inf", "1", "1000", "20"]  # as Triton writes them
    assert h["count"] - before.get("count", 0) == 4
    assert h["+Inf"] == h["count"]
    assert h["20"] - before.get("20", 0) <= 1  # only the 0 ms request can be under 20 ms
    assert h["1000"] - before.get("1000", 0) == 4
    assert h["sum"] - before.get("sum", 0) >= 75
    assert h["sum"] == int(h["sum"])  # whole milliseconds, as Triton observes them
    client.close()


def test_ordinary_models_get_the_default_buckets(server):
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    _infer(client, "plain", 1)
    _infer(client, "other_family", 1)  # a family Triton does not customize: the default buckets
    for model in ("plain", "other_family"):
        h = _histogram(server, model)
        assert sorted(float(k) for k in h if k not in ("sum", "count", "+Inf")) == [100.0, 500.0, 2000.0, 5000.0]
        assert h["count"] >= 1 and h["+Inf"] == h["count"]
    assert (
        "Metric family 'nv_inference_request_duration_us' in 'metric_identifier' is not a customizable metric "
        "in Triton core.; model 'other_family', model_metrics.metric_control[0]" in server.log()
    )
    client.close()


@pytest.mark.parametrize("model", sorted(INCOMPLETE))
def test_an_incomplete_metric_control_fails_the_load(server, model):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model)
    sentence = INCOMPLETE[model][1]
    assert info.value.status() == "400", info.value
    assert f"{sentence}; model '{model}', model_metrics.metric_control[0]" in info.value.message()
    assert not client.is_model_ready(model)
    assert client.is_model_ready("bucketed")
    client.close()
