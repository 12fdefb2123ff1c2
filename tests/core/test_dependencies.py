"""The load and unload order of ensembles and the models their steps call (pure functions)."""

from __future__ import annotations

from inferd.lifecycle.dependencies import Unload, callers, composing, load_waves, unload_order

# pre -> (a, b); pipe -> (pre, c); top -> (pipe,); a, b, c are plain models.
GRAPH = {"a": (), "b": (), "c": (), "pre": ("a", "b"), "pipe": ("pre", "c"), "top": ("pipe",)}


def test_waves_put_called_models_first():
    assert load_waves(GRAPH, ["top", "pipe", "pre", "a", "b", "c"]) == [["a", "b", "c"], ["pre"], ["pipe"], ["top"]]


def test_waves_ignore_models_not_being_loaded():
    # 'pre' is not among the names (already serving, say): 'pipe' need not wait for anything.
    assert load_waves(GRAPH, ["pipe", "c"]) == [["c"], ["pipe"]]
    assert load_waves(GRAPH, ["pipe"]) == [["pipe"]]
    assert load_waves(GRAPH, []) == []


def test_waves_load_a_cycle_all_at_once_after_what_it_does_not_need():
    calls = {"x": ("y",), "y": ("x",), "z": ("x",), "p": ()}
    assert load_waves(calls, ["x", "y", "z", "p"]) == [["p"], ["x", "y", "z"]]


def test_waves_ignore_a_model_calling_itself_and_repeated_names():
    calls = {"self": ("self", "a"), "a": ()}
    assert load_waves(calls, ["self", "a", "a"]) == [["a"], ["self"]]


def test_composing_lists_each_model_after_what_it_calls():
    assert composing(GRAPH, "top") == ["a", "b", "pre", "c", "pipe"]
    assert composing(GRAPH, "pre") == ["a", "b"]
    assert composing(GRAPH, "a") == []


def test_composing_skips_unknown_models_repeats_and_cycles():
    calls = {"e": ("missing", "m", "f", "m"), "f": ("m", "e"), "m": ()}
    assert composing(calls, "e") == ["m", "f"]


def test_callers_are_the_models_calling_it_directly():
    assert callers(GRAPH, "pre") == ["pipe"]
    assert callers(GRAPH, "a") == ["pre"]
    assert callers(GRAPH, "top") == []
    assert callers({"e": ("e",)}, "e") == []


def test_unloading_a_composing_model_takes_down_every_ensemble_above_it():
    # Each names the model asked to unload as the cause, as the reason text always has.
    assert unload_order(GRAPH, "a") == [Unload("a"), Unload("pre", "a"), Unload("pipe", "a"), Unload("top", "a")]


def test_unloading_an_ensemble_leaves_what_it_calls_by_default():
    assert unload_order(GRAPH, "pipe") == [Unload("pipe"), Unload("top", "pipe")]


def test_unloading_dependents_takes_the_composing_models_no_one_else_calls():
    calls = {**GRAPH, "other": ("b",)}
    assert unload_order(calls, "pipe", dependents=True) == [
        Unload("pipe"),
        Unload("top", "pipe"),
        Unload("pre"),
        Unload("a"),  # 'b' stays: 'other' still calls it
        Unload("c"),
    ]


def test_unloading_a_model_not_serving_still_takes_down_its_callers():
    serving = {"pre": ("a", "b"), "b": ()}  # 'a' failed to load, 'pre' still serves
    assert unload_order(serving, "a", dependents=True) == [Unload("a"), Unload("pre", "a")]
