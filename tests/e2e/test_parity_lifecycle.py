"""Start-up and load rules Triton 2.51 applies, end to end against a real ``inferd serve``.

Checked against tritonserver 2.51 (CPU, Python backend) with the same command lines: a missing
model repository (it stops the server; with ``--exit-on-error=false`` the server runs on and is
not ready), a response cache on a decoupled ensemble (refused at load) and the two cache flags
given together (refused at start).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.testing import ServerProcess, write_repository
from inferd.testing.servers import free_ports
from tests.http_calls import http_call
from tests.python_models import source
from tests.servers import Servers

IDENTITY = source("parity_lifecycle_identity")
IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
PLAIN = 'backend: "python"\nmax_batch_size: 0\n' + IO
STREAMING = PLAIN + "model_transaction_policy { decoupled: true }\n"
# An ensemble made decoupled by its step, asking for the response cache.
CACHED_ENSEMBLE = (
    'platform: "ensemble"\nmax_batch_size: 0\nresponse_cache { enable: true }\n'
    + IO
    + """
ensemble_scheduling { step [ { model_name: "streaming" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "OUTPUT0" } } ] }
"""
)
CACHE_SENTENCE = (
    "Response Cache does not currently support model cached_ensemble with 'decoupled' transaction "
    "policy. Please disable the response cache."
)


def _status(url: str) -> int:
    return http_call(url, timeout=10)[0]


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    """``inferd serve`` that is expected to stop at start-up; its exit code and output."""
    http, grpc, metrics = free_ports(3)
    cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--http-address", "127.0.0.1", "--http-port", str(http),
           "--grpc-port", str(grpc), "--metrics-port", str(metrics), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = {
        "plain": {"config.pbtxt": PLAIN, "1/model.py": IDENTITY},
        "streaming": {"config.pbtxt": STREAMING, "1/model.py": IDENTITY},
        "cached_ensemble": {"config.pbtxt": CACHED_ENSEMBLE, "1/.keep": ""},
    }
    return write_repository(tmp_path_factory.mktemp("lifecycle") / "models", models)


@pytest.fixture(scope="module")
def server(repo: Path, serve: Servers) -> ServerProcess:
    missing = repo.parent / "no-such-repository"
    return serve([repo, missing], "--exit-on-error=false", "--cache-config", "local,size=1048576", wait_ready=False)


def test_missing_repository_with_exit_on_error_false_runs_on_unready(server):
    # Triton 2.51: logs "failed to stat file <path>", keeps running, never ready. inferd before: exited.
    assert _status(f"http://{server.http_url}/v2/health/live") == 200
    assert _status(f"http://{server.http_url}/v2/health/ready") == 400
    assert "failed to stat file" in server.log()
    client = httpclient.InferenceServerClient(server.http_url)
    try:  # the other repository's models serve
        inp = httpclient.InferInput("INPUT0", [2], "FP32")
        inp.set_data_from_numpy(np.array([1, 2], np.float32))
        assert client.infer("plain", [inp]).as_numpy("OUTPUT0").tolist() == [1.0, 2.0]
    finally:
        client.close()


def test_decoupled_ensemble_with_response_cache_is_refused(server):
    # Triton 2.51 refuses it at load with this sentence; inferd before: loaded, uncached.
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        index = {m["name"]: m for m in client.get_model_repository_index()}
    finally:
        client.close()
    assert index["streaming"]["state"] == "READY"
    assert index["cached_ensemble"]["state"] == "UNAVAILABLE"
    assert CACHE_SENTENCE in index["cached_ensemble"]["reason"]


def test_missing_repository_stops_the_server(repo):
    result = _serve("--model-repository", str(repo), "--model-repository", str(repo.parent / "nowhere"))
    assert result.returncode != 0
    assert f"error: creating server: Internal - failed to stat file {repo.parent / 'nowhere'}" in result.stderr


def test_both_cache_flags_are_refused(repo):
    # Triton 2.51's sentence; inferd before: started with both.
    result = _serve("--model-repository", str(repo), "--response-cache-byte-size", "1024",
                    "--cache-config", "local,size=2048")  # fmt: skip
    assert result.returncode != 0
    assert (
        "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
        "Please provide one or the other." in result.stderr
    )
