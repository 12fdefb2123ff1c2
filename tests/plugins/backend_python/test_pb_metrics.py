"""Custom metrics of Python models: what the backend's metrics source yields, sharing and lifetime."""

from __future__ import annotations

import pytest
from triton_python_backend_utils import MetricFamily, TritonModelException

from inferd.api import SOURCES
from inferd_backend_python import pb_request
from inferd_backend_python.pb_metrics import FAMILIES
from tests.python_models import source

from .conftest import make_request

CODE = source("pb_metrics")


@pytest.fixture
def no_model():
    """Run as plain Python would (no model bound), as a ``model.py`` unit test does."""
    token = pb_request._CURRENT.set(None)
    saved, pb_request._last_bound[0] = pb_request._last_bound[0], None
    yield
    FAMILIES.model_unloaded(None)
    pb_request._CURRENT.reset(token)
    pb_request._last_bound[0] = saved


def _samples(name: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for f in SOURCES.collect() if f.name == name for s in f.samples]


def test_a_loaded_models_families_are_a_metrics_source_until_it_unloads(load_model):
    import numpy as np

    first = load_model("one", CODE)
    second = load_model("two", CODE)
    first.infer(make_request("one", {"X": np.array([1.0])}), make_request("one", {"X": np.array([3.0])}))
    assert _samples("unit_hits") == [("unit_hits", {"model": "one"}, 3), ("unit_hits", {"model": "two"}, 0)]
    assert _samples("unit_sizes") == [
        ("unit_sizes_count", {}, 2),
        ("unit_sizes_sum", {}, 4),
        ("unit_sizes_bucket", {"le": "0.5"}, 0),
        ("unit_sizes_bucket", {"le": "2"}, 1),
        ("unit_sizes_bucket", {"le": "+Inf"}, 2),
    ]  # both models' histograms have no labels: one series, shared
    first.instance.close()
    first.model.unload()
    assert _samples("unit_hits") == [("unit_hits", {"model": "two"}, 0)]
    second.instance.close()
    second.model.unload()
    assert _samples("unit_hits") == [] and _samples("unit_sizes") == []


def test_families_made_outside_a_server_are_not_exported(no_model):
    family = MetricFamily("unit_outside", "x", MetricFamily.GAUGE)
    family.Metric(labels={"a": "b"}).set(4)
    assert family.Metric(labels={"a": "b"}).value() == 4  # the same series for the same labels
    assert _samples("unit_outside") == []


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MetricFamily("bad name", "x", MetricFamily.COUNTER), "a metric name must match"),
        (lambda: MetricFamily("unit_k", "x", 9), "unknown kind 9"),
        (lambda: MetricFamily("unit_l", "x", MetricFamily.GAUGE).Metric(labels={"n": 1}), "labels are strings"),
        (lambda: MetricFamily("unit_b", "x", MetricFamily.COUNTER).Metric(buckets=[1.0]), "Only a HISTOGRAM"),
        (lambda: MetricFamily("unit_h", "x", MetricFamily.HISTOGRAM).Metric(buckets=[2.0, 1.0]), "must increase"),
    ],
)
def test_invalid_families_and_metrics_raise(no_model, make, message):
    with pytest.raises(TritonModelException, match=message):
        make()


SHARED_CODE = source("pb_metrics_shared_code")


def test_one_name_is_one_family_and_one_label_set_one_series(load_model):
    load_model("shared", SHARED_CODE)
    [family] = [f for f in SOURCES.collect() if f.name == "unit_shared"]
    assert family.documentation == "First words"
    assert [(s.labels, s.value) for s in family.samples] == [({"k": "1"}, 3)]
    assert _samples("unit_no_buckets") == [
        ("unit_no_buckets_count", {}, 1),
        ("unit_no_buckets_sum", {}, 3),
        ("unit_no_buckets_bucket", {"le": "+Inf"}, 1),
    ]
