"""A model an ensemble calls reloads with other inputs: the ensemble is rebuilt over it, or leaves
serving with a reason naming the step and the tensor; it never stays READY while every request
fails on a shape the client did not choose. A real ``inferd serve`` in poll and
explicit mode, Python step models written here, requests through tritonclient.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.background import Background
from tests.python_models import source
from tests.waiting import wait_for

STEP_CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {n} ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {n} ] }} ]
"""

# Y = 2 X, whatever the shape: only the config says what the step takes.
STEP_PY = source("double")
ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ {n} ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {n} ] }} ]
ensemble_scheduling {{
  step [ {{ model_name: "double" model_version: -1 input_map {{ key: "X" value: "IN" }} output_map {{ key: "Y" value: "OUT" }} }} ]
}}
"""

POLL = ["--model-control-mode=poll", "--repository-poll-secs=0.2"]


def override(n: int) -> str:
    """The step's config as a load request's ``config`` parameter (JSON), with dims ``[n]``."""
    tensor = {"data_type": "TYPE_FP32", "dims": [n]}
    return json.dumps({"backend": "python", "max_batch_size": 0,
                       "input": [{"name": "X", **tensor}], "output": [{"name": "Y", **tensor}]})  # fmt: skip


def repository(tmp_path, step: int = 3, ensemble: int = 3):
    return write_repository(
        tmp_path / "models",
        {
            "double": {"config.pbtxt": STEP_CONFIG.format(n=step), "1/model.py": STEP_PY},
            "pipe": {"config.pbtxt": ENSEMBLE_CONFIG.format(n=ensemble), "1/.keep": ""},
        },
    )


def edit(repo, step: int | None = None, ensemble: int | None = None) -> None:
    """Rewrite the step's and/or the ensemble's config with dims ``[n]`` (one burst of writes)."""
    if step is not None:
        (repo / "double" / "config.pbtxt").write_text(STEP_CONFIG.format(n=step))
    if ensemble is not None:
        (repo / "pipe" / "config.pbtxt").write_text(ENSEMBLE_CONFIG.format(n=ensemble))


def call(client, model: str, n: int) -> np.ndarray:
    x = np.arange(1, n + 1, dtype=np.float32)
    tensor = httpclient.InferInput("IN" if model == "pipe" else "X", [n], "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(model, [tensor]).as_numpy("OUT" if model == "pipe" else "Y")


def expected(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float32) * 2


def row(client, name: str) -> dict[str, str]:
    rows = [r for r in client.get_model_repository_index() if r["name"] == name and r.get("version") == "1"]
    return rows[0] if rows else {}


def input_dims(client, name: str) -> list[int]:
    try:
        return [int(d) for d in client.get_model_metadata(name)["inputs"][0]["shape"]]
    except InferenceServerException:
        return []


def unavailable_for_the_step(client) -> bool:
    r = row(client, "pipe")
    return r.get("state") == "UNAVAILABLE" and "'double'" in r.get("reason", "")


def traffic(url: str) -> Background:
    """Requests to the ensemble with the shape it was made for ([3]), from a thread, until stopped;
    every failure kept with its message."""
    clients: list[httpclient.InferenceServerClient] = []  # made on the thread that uses it

    def ask(_: int) -> None:
        if not clients:
            clients.append(httpclient.InferenceServerClient(url))
        out = call(clients[0], "pipe", 3)
        assert np.array_equal(out, expected(3)), f"wrong answer {out}"

    return Background(ask, pause=0.005)


def test_a_step_changed_under_poll_takes_its_ensemble_out_until_it_fits_again(tmp_path):
    repo = repository(tmp_path)
    with ServerProcess([repo], POLL) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        np.testing.assert_array_equal(call(client, "pipe", 3), expected(3))
        with traffic(srv.http_url) as load:
            wait_for(lambda: load.ok > 5, "answers before the edit")
            edit(repo, step=4)
            wait_for(lambda: input_dims(client, "double") == [4], "the step to reload with dims [4]")
            wait_for(lambda: unavailable_for_the_step(client), "the ensemble to leave serving")
            reason = row(client, "pipe")["reason"]
            # the step, its input and the ensemble tensor, with the shapes that disagree
            assert "step 0 (model 'double') input 'X'" in reason, reason
            assert "ensemble tensor 'IN'" in reason and "[3]" in reason and "[4]" in reason, reason
            assert not client.is_model_ready("pipe")
            np.testing.assert_array_equal(call(client, "double", 4), expected(4))  # the step serves its new config
            with pytest.raises(InferenceServerException, match="'pipe' has no available versions"):
                call(client, "pipe", 3)
            # the traffic meets the ensemble while it is out (waited for: on a busy machine the
            # traffic thread may not have sent one yet)
            wait_for(lambda: len(load.failures) > 0, "the traffic to meet the ensemble while it is out")

            edit(repo, step=3)  # the step fixed back: the ensemble serves again, no restart
            wait_for(lambda: row(client, "pipe").get("state") == "READY", "the ensemble to serve again")
            answers = load.ok
            wait_for(lambda: load.ok > answers + 5, "answers after the fix")
        assert client.is_model_ready("pipe") and "reason" not in row(client, "pipe")
        np.testing.assert_array_equal(call(client, "pipe", 3), expected(3))
    # No request ever failed on its shape: before the edit and after the fix they were answered,
    # in between the ensemble was not there (never READY while failing).
    blamed = [f for f in load.failures if "has no available versions" not in f and "is unloading" not in f]
    assert blamed == [], blamed[:5]


def test_a_step_and_its_ensemble_edited_together_serve_together_under_poll(tmp_path):
    repo = repository(tmp_path)
    with ServerProcess([repo], POLL) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        # both files in one scan
        edit(repo, step=4, ensemble=4)
        wait_for(lambda: input_dims(client, "pipe") == [4], "the ensemble with dims [4]")
        wait_for(lambda: client.is_model_ready("pipe"), "the ensemble ready")
        np.testing.assert_array_equal(call(client, "pipe", 4), expected(4))

        # the step first, the ensemble in a later scan
        edit(repo, step=5)
        wait_for(lambda: unavailable_for_the_step(client), "the ensemble to leave serving")
        edit(repo, ensemble=5)
        wait_for(lambda: client.is_model_ready("pipe"), "the ensemble ready with dims [5]")
        np.testing.assert_array_equal(call(client, "pipe", 5), expected(5))

        # the ensemble first: it cannot load over the old step, and the old one keeps serving...
        edit(repo, ensemble=6)
        wait_for(lambda: "reload failed" in row(client, "pipe").get("reason", ""), "the ensemble's failed reload")
        assert client.is_model_ready("pipe") and input_dims(client, "pipe") == [5]
        np.testing.assert_array_equal(call(client, "pipe", 5), expected(5))
        # ...until the step follows: then the ensemble as the repository has it serves
        edit(repo, step=6)
        wait_for(lambda: input_dims(client, "pipe") == [6], "the ensemble with dims [6]")
        assert client.is_model_ready("pipe") and "reason" not in row(client, "pipe")
        np.testing.assert_array_equal(call(client, "pipe", 6), expected(6))
        assert client.is_server_ready()


def test_an_explicit_load_of_a_changed_step_follows_the_same_rule(tmp_path):
    repo = repository(tmp_path)
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=pipe"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        np.testing.assert_array_equal(call(client, "pipe", 3), expected(3))
        edit(repo, step=4)
        client.load_model("double")  # the step's load succeeds...
        assert input_dims(client, "double") == [4]
        assert unavailable_for_the_step(client)  # ...and the ensemble left serving at once
        assert "ensemble tensor 'IN'" in row(client, "pipe")["reason"]
        assert not client.is_server_ready()  # strict readiness: a model cannot serve
        with pytest.raises(InferenceServerException, match="'pipe' has no available versions"):
            call(client, "pipe", 3)

        edit(repo, step=3)
        client.load_model("double")  # the step back as it was: the ensemble serves again
        assert client.is_model_ready("pipe") and client.is_server_ready()
        np.testing.assert_array_equal(call(client, "pipe", 3), expected(3))

        edit(repo, step=7, ensemble=7)  # a two-file edit: load the step, then the ensemble
        client.load_model("double")
        assert not client.is_model_ready("pipe")
        client.load_model("pipe")
        assert client.is_model_ready("pipe") and input_dims(client, "pipe") == [7]
        np.testing.assert_array_equal(call(client, "pipe", 7), expected(7))

        # a config override through the load request is a change like any other
        client.load_model("double", config=override(2))
        assert unavailable_for_the_step(client)
        client.unload_model("pipe")  # unloaded while out: a later change of the step does not bring it back
        client.load_model("double", config=override(7))
        assert input_dims(client, "double") == [7]
        assert row(client, "pipe").get("state") == "UNAVAILABLE" and row(client, "pipe").get("reason") == "unloaded"


OUTER_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "B" data_type: TYPE_FP32 dims: [ 3 ] } ]
ensemble_scheduling {
  step [ { model_name: "pipe" model_version: -1 input_map { key: "IN" value: "A" } output_map { key: "OUT" value: "B" } } ]
}
"""


def test_an_ensemble_over_an_ensemble_follows_the_one_it_calls(tmp_path):
    repo = repository(tmp_path)
    write_repository(repo, {"outer": {"config.pbtxt": OUTER_CONFIG}})
    with ServerProcess([repo], POLL) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)

        def outer() -> np.ndarray:
            tensor = httpclient.InferInput("A", [3], "FP32")
            tensor.set_data_from_numpy(np.arange(1, 4, dtype=np.float32))
            return client.infer("outer", [tensor]).as_numpy("B")

        np.testing.assert_array_equal(outer(), expected(3))
        edit(repo, step=4)
        wait_for(lambda: row(client, "outer").get("state") == "UNAVAILABLE", "the outer ensemble to leave serving")
        assert unavailable_for_the_step(client)
        assert "step 0 (model 'pipe')" in row(client, "outer")["reason"], row(client, "outer")
        edit(repo, step=3)
        wait_for(lambda: client.is_model_ready("outer"), "the outer ensemble to serve again")
        assert client.is_model_ready("pipe")
        np.testing.assert_array_equal(outer(), expected(3))
