"""``inferd check`` finds, offline, the errors a server reports on the same repository (three broken
models), and ``inferd health`` answers that server's state with its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import ServerProcess, free_port, write_repository
from tests.e2e import models
from tests.servers import Servers

ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ { model_name: "add_subb" model_version: -1
  input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "B" } } ] }
"""
BROKEN = {
    "typo": models.ADD_SUB_CONFIG.replace("TYPE_FP32", "TYPE_STRNG", 1),
    "negative_batch": models.ADD_SUB_CONFIG.replace("max_batch_size: 8", "max_batch_size: -1"),
    "ensemble": ENSEMBLE,
}


def inferd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferd.host.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    files = {name: {"config.pbtxt": config, "1/model.py": models.add_sub_py(0)}
             for name, config in BROKEN.items()}  # fmt: skip
    return write_repository(tmp_path_factory.mktemp("check") / "models", {"add_sub": models.add_sub(), **files})


@pytest.fixture(scope="module")
def server(repo: Path, serve: Servers) -> ServerProcess:
    return serve(repo, "--exit-on-error=false", wait_ready=False)


def test_check_reports_what_the_server_reports(repo: Path, server: ServerProcess) -> None:
    done = inferd("check", "--json", str(repo))
    assert done.returncode == 1, done.stderr
    found = {m["name"]: m for m in json.loads(done.stdout)["models"]}
    assert found["add_sub"] == {"name": "add_sub", "ok": True, "backend": "python", "versions": [1], "error": "",
                                "warnings": []}  # fmt: skip
    health = inferd("health", server.http_url, "--json")
    index = {row["name"]: row for row in json.loads(health.stdout)["models"]}
    for name in BROKEN:
        assert not found[name]["ok"]
        assert found[name]["error"] == index[name]["reason"], name
    assert "unknown value 'TYPE_STRNG'" in found["typo"]["error"]
    assert "'max_batch_size' must be non-negative value for negative_batch; got -1" in found["negative_batch"]["error"]
    assert "calls a model that is not available: it is not in the model repository" in found["ensemble"]["error"]

    text = inferd("check", str(repo))
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["add_sub", "OK", "python,", "versions", "[1]"]
    assert lines[-1] == "4 model(s) checked, 3 with errors"
    assert inferd("check", str(repo / "add_sub" / ".."), "--json").returncode == 1
    good = write_repository(repo.parent / "good", {"add_sub": models.add_sub()})
    assert inferd("check", str(good)).returncode == 0
    missing = inferd("check", str(repo.parent / "nope"))
    assert missing.returncode == 1 and "failed to stat file" in missing.stdout


def test_health_exit_codes_for_probes(server: ServerProcess) -> None:
    not_ready = inferd("health", server.http_url)
    assert not_ready.returncode == 1, not_ready.stdout
    assert not_ready.stdout.splitlines()[0] == f"http://{server.http_url}: live yes, ready no"
    assert "  typo 1 UNAVAILABLE: model 'typo': config.pbtxt line" in not_ready.stdout
    assert inferd("health", f"http://{server.http_url}", "--live").returncode == 0
    down = inferd("health", f"127.0.0.1:{free_port()}", "--timeout", "2")
    assert down.returncode == 3 and "live no" in down.stdout
