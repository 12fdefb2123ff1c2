"""Model control end to end: explicit load/unload, poll mode under traffic, failed loads, shutdown."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading

import gevent
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.triton_clients import add_sub_call, repository_index
from tests.waiting import wait_for


def test_explicit_mode_load_unload_and_failed_load(tmp_path):
    repo = write_repository(
        tmp_path / "models",
        {
            "add_sub": models.add_sub(offset=0),
            "other": models.add_sub(offset=100),
            "broken": {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": models.BROKEN_PY},
        },
    )
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=add_sub"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.is_model_ready("add_sub")
        assert not client.is_model_ready("other")
        idx = repository_index(client)
        assert idx[("add_sub", "1")] == ("READY", "")
        assert ("other", "") in idx  # listed, never loaded

        client.load_model("other")
        np.testing.assert_array_equal(add_sub_call(client, "other"), [[102, 104, 106, 108]])

        with pytest.raises(InferenceServerException) as err:
            client.load_model("broken")
        assert "broken" in str(err.value) and "cannot import this model" in str(err.value)
        state, reason = repository_index(client)[("broken", "1")]
        assert state == "UNAVAILABLE" and "cannot import this model" in reason

        with pytest.raises(InferenceServerException) as err:
            client.load_model("does_not_exist")
        assert "does_not_exist" in str(err.value)

        client.unload_model("other")
        wait_for(lambda: not client.is_model_ready("other"), what="unload")
        with pytest.raises(InferenceServerException) as err:
            add_sub_call(client, "other")
        assert "other" in str(err.value)
        assert repository_index(client)[("other", "1")][0] == "UNAVAILABLE"

        # A config override in the load request, as tritonclient sends it.
        override = {
            "backend": "python", "max_batch_size": 2,
            "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("OUTPUT0", "OUTPUT1")],
        }  # fmt: skip
        client.load_model("other", config=json.dumps(override))
        assert client.get_model_config("other")["max_batch_size"] == 2
        np.testing.assert_array_equal(add_sub_call(client, "other"), [[102, 104, 106, 108]])

        # the model that stayed loaded was never disturbed
        np.testing.assert_array_equal(add_sub_call(client), [[2, 4, 6, 8]])
        assert client.is_server_live()


@pytest.mark.parametrize("workers", [1, 2])
def test_poll_mode_add_change_remove_under_traffic(tmp_path, workers):
    repo = write_repository(
        tmp_path / "models", {"add_sub": models.add_sub(offset=0), "steady": models.add_sub(offset=5)}
    )
    args = ["--model-control-mode=poll", "--repository-poll-secs=1", f"--workers={workers}"]
    srv = ServerProcess([repo], args).start()
    failures: list[str] = []
    sent = [0]
    stop = threading.Event()

    def traffic() -> None:
        client = httpclient.InferenceServerClient(srv.http_url)
        while not stop.is_set():
            if workers > 1:  # a new connection each time: the kernel spreads them over the workers
                client.close()
                client = httpclient.InferenceServerClient(srv.http_url)
            try:
                out = add_sub_call(client, "steady")
                if not np.array_equal(out, [[7, 9, 11, 13]]):
                    failures.append(f"wrong answer {out}")
                out = add_sub_call(client, "add_sub")  # must never fail while it is being reloaded
                sent[0] += 1
            except Exception as exc:
                failures.append(repr(exc))

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        # add a model
        write_repository(repo, {"late": models.add_sub(offset=1000)})
        wait_for(lambda: client.is_model_ready("late"), what="new model")
        np.testing.assert_array_equal(add_sub_call(client, "late"), [[1002, 1004, 1006, 1008]])

        # a new version appears: the policy (latest 1) switches to it
        (repo / "add_sub" / "2").mkdir()
        (repo / "add_sub" / "2" / "model.py").write_text(models.add_sub_py(10))
        wait_for(lambda: client.get_model_metadata("add_sub")["versions"] == ["2"], what="version 2")
        np.testing.assert_array_equal(add_sub_call(client, "add_sub"), [[12, 14, 16, 18]])

        # an edited config: max_batch_size changes
        cfg = (repo / "add_sub" / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 3")
        (repo / "add_sub" / "config.pbtxt").write_text(cfg)
        wait_for(lambda: client.get_model_config("add_sub")["max_batch_size"] == 3, what="edited config")

        # a broken edit keeps the old version serving, with the reason in the index
        (repo / "add_sub" / "2" / "model.py").write_text(models.BROKEN_PY)
        wait_for(
            lambda: "cannot import" in repository_index(client).get(("add_sub", "2"), ("", ""))[1], what="failed reload"
        )
        np.testing.assert_array_equal(add_sub_call(client, "add_sub"), [[12, 14, 16, 18]])
        (repo / "add_sub" / "2" / "model.py").write_text(models.add_sub_py(20))
        wait_for(lambda: add_sub_call(client, "add_sub")[0, 0] == 22, what="repaired model")

        # remove a model
        shutil.rmtree(repo / "late")
        wait_for(lambda: not client.is_model_ready("late"), what="removal")
        with pytest.raises(InferenceServerException):
            add_sub_call(client, "late")
    finally:
        stop.set()
        worker.join()
        srv.stop()
    assert sent[0] > 10
    assert failures == [], failures[:5]


def test_sigterm_lets_in_flight_requests_finish(tmp_path):
    repo = write_repository(tmp_path / "models", {"slow": models.simple(models.SLOW_CONFIG, models.SLOW_PY)})
    srv = ServerProcess([repo]).start()
    client = httpclient.InferenceServerClient(srv.http_url, concurrency=4)
    inp = httpclient.InferInput("MS", [1], "INT32")
    inp.set_data_from_numpy(np.array([1500], np.int32))
    jobs = [client.async_infer("slow", [inp]) for _ in range(3)]
    gevent.sleep(0.5)  # the requests are executing (the client sends them from greenlets: they run now)
    os.kill(srv.proc.pid, signal.SIGTERM)
    for job in jobs:
        assert job.get_result().as_numpy("MS_OUT")[0] == 1500
    assert srv.proc.wait(30) == 0
    srv.stop()


#: A server that starts (and reports ready) with a model that failed to load: not Triton's default.
STARTS_WITH_A_BROKEN_MODEL = ["--exit-on-error=false", "--strict-readiness=false"]


def test_two_repositories_and_duplicate_names(tmp_path):
    one = write_repository(tmp_path / "one", {"a": models.add_sub(offset=1), "dup": models.add_sub()})
    two = write_repository(tmp_path / "two", {"b": models.add_sub(offset=2), "dup": models.add_sub()})
    with ServerProcess([one, two], STARTS_WITH_A_BROKEN_MODEL) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert add_sub_call(client, "a")[0, 0] == 3
        assert add_sub_call(client, "b")[0, 0] == 4
        state, reason = repository_index(client)[("dup", "")]
        assert state == "UNAVAILABLE" and "more than one repository" in reason


def test_missing_config_with_autocomplete_disabled(tmp_path):
    repo = write_repository(
        tmp_path / "models", {"ok": models.add_sub(), "noconf": {"1/model.py": models.add_sub_py(0)}}
    )
    with ServerProcess([repo], ["--disable-auto-complete-config", *STARTS_WITH_A_BROKEN_MODEL]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        state, reason = repository_index(client)[("noconf", "1")]
        assert state == "UNAVAILABLE" and "auto-complete is disabled" in reason
        assert add_sub_call(client, "ok")[0, 0] == 2


def test_serve_rejects_a_missing_repository(tmp_path):
    srv = ServerProcess([tmp_path / "nowhere"])
    with pytest.raises(RuntimeError) as err:
        srv.start(timeout=60)
    assert "nowhere" in str(err.value)
    srv.stop()


def test_version_policy_all_and_specific(tmp_path):
    cfg_all = models.ADD_SUB_CONFIG + "version_policy: { all: {} }\n"
    cfg_specific = models.ADD_SUB_CONFIG + "version_policy: { specific: { versions: [1, 3] } }\n"
    repo = write_repository(tmp_path / "models", {
        "all": models.add_sub(versions=(1, 2, 3), config=cfg_all),
        "specific": models.add_sub(versions=(1, 2, 3), config=cfg_specific),
        "latest": models.add_sub(versions=(1, 2, 3)),
    })  # fmt: skip
    with ServerProcess([repo]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.get_model_metadata("all")["versions"] == ["1", "2", "3"]
        assert client.get_model_metadata("specific")["versions"] == ["1", "3"]
        assert client.get_model_metadata("latest")["versions"] == ["3"]
        assert add_sub_call(client, "all", "2")[0, 0] == 2
        with pytest.raises(InferenceServerException):
            add_sub_call(client, "specific", "2")


def test_load_with_config_and_file_overrides(tmp_path):
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub(offset=0)})
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=add_sub"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        config = {
            "backend": "python", "max_batch_size": 8,
            "input": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, "data_type": "TYPE_FP32", "dims": [4]} for n in ("OUTPUT0", "OUTPUT1")],
        }  # fmt: skip
        code = models.add_sub_py(500).encode()
        client.load_model("add_sub", config=json.dumps(config), files={"file:3/model.py": code})
        assert client.get_model_metadata("add_sub")["versions"] == ["3"]
        assert add_sub_call(client)[0, 0] == 502
        with pytest.raises(InferenceServerException) as err:
            client.load_model("add_sub", files={"file:1/model.py": code})
        assert "config" in str(err.value)
        with pytest.raises(InferenceServerException) as err:
            client.load_model("add_sub", config=json.dumps(config), files={"file:../escape.py": code})
        assert "leaves the model directory" in str(err.value)
        client.unload_model("never_heard_of_it")  # as in Triton: succeeds
        # the repository copy is untouched and loads again
        client.load_model("add_sub")
        assert add_sub_call(client)[0, 0] == 2


def test_failed_reload_through_the_api_is_an_error_and_keeps_the_old_version(tmp_path):
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub(offset=0)})
    with ServerProcess([repo], ["--model-control-mode=explicit", "--load-model=add_sub"]) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        (repo / "add_sub" / "1" / "model.py").write_text(models.BROKEN_PY)
        with pytest.raises(InferenceServerException) as err:
            client.load_model("add_sub")
        assert "cannot import this model" in str(err.value)
        assert add_sub_call(client)[0, 0] == 2  # the previous version still serves
