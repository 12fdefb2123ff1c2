"""Errors that name the next step, on a real server and the real commands: Triton's sentence first
where Triton has one, then what to type (a did-you-mean, the names the repository has, how to load
a model), and the tools naming the other protocol's port instead of printing its bytes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, write_repository
from tests.e2e import models

POLL_FAILURE = "failed to load '{}', failed to poll from model repository"
#: Twelve models: the load error lists ten of them.
FILLERS = [f"zeta_{i}" for i in range(9)]


def inferd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inferd.host.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    bad_type = {
        "config.pbtxt": models.ADD_SUB_CONFIG.replace("TYPE_FP32", "TYPE_FP3", 1),
        "1/model.py": models.add_sub_py(0),
    }
    repo = write_repository(
        tmp_path_factory.mktemp("next_step") / "models",
        {"add_sub": models.add_sub(), "add_sub2": models.add_sub(), "bad_type": bad_type}
        | {name: models.add_sub() for name in FILLERS},
    )
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    proc = ServerProcess([repo], args, env={"INFERD_DISABLE_PLUGINS": "metrcs"}).start()
    yield proc
    proc.stop()


def post(server: ServerProcess, path: str, body: object = None) -> tuple[int, str]:
    data = json.dumps(body if body is not None else {}).encode()
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"]


def grpc_error(server: ServerProcess, call: str, *args: object) -> InferenceServerException:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as err:
            getattr(client, call)(*args)
    finally:
        client.close()
    return err.value


def test_loading_a_misspelt_model_suggests_the_closest_name(server: ServerProcess) -> None:
    want = POLL_FAILURE.format("add_sbu") + "; did you mean 'add_sub'?"
    assert post(server, "/v2/repository/models/add_sbu/load") == (404, want)
    err = grpc_error(server, "load_model", "add_sbu")
    assert (err.status(), err.message()) == ("StatusCode.NOT_FOUND", want)


def test_loading_an_unknown_model_lists_what_the_repository_has(server: ServerProcess) -> None:
    status, error = post(server, "/v2/repository/models/nothing_like_it/load")
    listed = ", ".join(repr(n) for n in ["add_sub", "add_sub2", "bad_type", *FILLERS[:7]])
    assert (status, error) == (404, f"{POLL_FAILURE.format('nothing_like_it')}; the repository has {listed} and 2 more")


def test_a_model_not_loaded_says_how_to_load_it(server: ServerProcess) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [0, 0, 0, 0]}]}
    advice = (
        "load it with POST /v2/repository/models/add_sub2/load (gRPC RepositoryModelLoad), "
        "or start the server with --load-model=add_sub2"
    )
    status, error = post(server, "/v2/models/add_sub2/infer", body)
    assert status == 404
    assert (
        error == f"Request for unknown model: 'add_sub2' is not found; it is in the repository but not loaded: {advice}"
    )
    assert post(server, "/v2/repository/models/add_sub2/load")[0] == 200
    assert post(server, "/v2/repository/models/add_sub2/unload")[0] == 200
    want = f"Request for unknown model: 'add_sub2' has no available versions; it is not loaded: {advice}"
    assert post(server, "/v2/models/add_sub2/infer", body) == (404, want)
    err = grpc_error(server, "get_model_metadata", "add_sub2")
    assert err.message() == want


def test_an_enum_typo_in_a_config_gets_a_did_you_mean(server: ServerProcess) -> None:
    status, error = post(server, "/v2/repository/models/bad_type/load")
    assert status == 400
    assert "unknown value 'TYPE_FP3' for DataType (did you mean 'TYPE_FP32'?); expected one of" in error
    status, error = post(server, "/v2/models/bad_type/infer", {"inputs": []})
    assert status == 404
    assert "'bad_type' has no available versions; its load failed (see /v2/repository/index" in error


def test_an_unknown_name_in_disable_plugins_is_warned(server: ServerProcess) -> None:
    assert "INFERD_DISABLE_PLUGINS names 'metrcs', which is not an installed plugin" in server.log()
    assert "did you mean 'metrics'?" in server.log()


def test_health_at_the_grpc_port_names_it_and_exits_not_reachable(server: ServerProcess) -> None:
    ran = inferd("health", server.grpc_url)
    assert ran.returncode == 3, ran.stdout + ran.stderr  # 1 is "live but not ready"
    assert "Traceback" not in ran.stderr and "\x00" not in ran.stdout
    assert "it looks like a gRPC port" in ran.stdout and f"grpc://{server.grpc_url}" in ran.stdout


def test_health_over_grpc(server: ServerProcess) -> None:
    over_http = inferd("health", server.http_url, "--json")
    ran = inferd("health", f"grpc://{server.grpc_url}", "--json")
    assert ran.returncode == over_http.returncode, ran.stdout + ran.stderr
    result, expected = json.loads(ran.stdout), json.loads(over_http.stdout)
    assert result["live"] and {"name": "add_sub", "version": "1", "state": "READY"} in result["models"]
    assert (result["ready"], result["models"]) == (expected["ready"], expected["models"])
    assert inferd("health", f"grpc://{server.grpc_url}", "--live").returncode == 0
    wrong = inferd("health", f"grpc://{server.http_url}")
    assert wrong.returncode == 3
    assert "it looks like the HTTP port" in wrong.stdout


def test_perf_at_the_other_protocols_port_says_so(server: ServerProcess) -> None:
    ran = inferd("perf", "-m", "add_sub", "-u", server.grpc_url, "--measurement-interval", "200")
    assert ran.returncode != 0
    assert "\\x00" not in ran.stderr and "Bad status line" not in ran.stderr
    assert "it looks like a gRPC port" in ran.stderr and "-i grpc" in ran.stderr
    ran = inferd("perf", "-m", "add_sub", "-i", "grpc", "-u", server.http_url, "--measurement-interval", "200")
    assert ran.returncode != 0
    assert "it looks like the HTTP port" in ran.stderr


def test_an_abbreviated_option_is_refused_with_the_full_one(tmp_path: Path) -> None:
    ran = inferd("serve", "--model-repo", str(tmp_path))
    assert ran.returncode == 2
    assert "unrecognized arguments: --model-repo (did you mean --model-repository?)" in ran.stderr
    ran = inferd("health", "--jso")
    assert ran.returncode == 2 and "did you mean --json?" in ran.stderr


def test_a_misspelt_load_model_at_start_up_suggests_the_closest_name(tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    ports = ["--http-port=0", "--grpc-port=0", "--metrics-port=0"]
    ran = inferd(
        "serve", "--model-repository", str(repo), "--model-control-mode=explicit", "--load-model=add_sbu", *ports
    )
    assert ran.returncode == 1
    assert f"{POLL_FAILURE.format('add_sbu')}; did you mean 'add_sub'?" in ran.stderr


def test_a_tenant_is_never_shown_a_model_it_may_not_see(tmp_path: Path) -> None:
    repo = write_repository(
        tmp_path / "models", {name: models.add_sub() for name in ("add_sub", "add_sub2", "secret_model")}
    )
    digest = hashlib.sha256(b"team-key").hexdigest()
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"tenants:\n  team: {{keys: [{digest}], models: ['add_*'], apis: [health, model-repository]}}\n")
    args = ["--model-control-mode=explicit", f"--auth-config={auth}"]
    with ServerProcess([repo], args) as server:
        answers = {}
        for name in ("secret_model", "secret_modl", "nothing_like_it"):
            request = urllib.request.Request(
                f"http://{server.http_url}/v2/repository/models/{name}/load",
                b"{}",
                {"Authorization": "Bearer team-key"},
            )
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=30)
            answers[name] = (err.value.code, json.loads(err.value.read())["error"])
    for name, answer in answers.items():
        assert answer == (404, f"{POLL_FAILURE.format(name)}; the repository has 'add_sub', 'add_sub2'")
