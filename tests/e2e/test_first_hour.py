"""What a new user meets in the first hour, on one server with TLS, API keys, a restricted API group
and poll mode: the start-up summary, a broken model added under poll (the server stays ready),
"did you mean" hints that never name a model the tenant may not see, and a clean stop."""

from __future__ import annotations

import re
import shutil
import signal
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferd.auth import digest
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.tls_server import TlsServer
from tests.http_calls import json_call
from tests.python_models import python_model

trustme = pytest.importorskip("trustme")

KEYS = {"alice": "alice-key", "bob": "bob-key", "ops": "ops-key"}
AUTH = f"""
tenants:
  alice: {{keys: [{digest("alice-key")}], models: ["add_*"]}}
  bob: {{keys: [{digest("bob-key")}], models: [string_identity]}}
  ops: {{keys: [{digest("ops-key")}], apis: [health, model-repository]}}
"""
FAILING_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("cannot open the weights")

    def execute(self, requests):
        return []
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    root = tmp_path_factory.mktemp("first_hour")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(root / "ca.pem")
    leaf = ca.issue_cert("localhost")
    (root / "server.pem").write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(root / "server.key")
    (root / "auth.yaml").write_text(AUTH)
    repo = write_repository(root / "models", {
        "add_sub": models.add_sub(), "string_identity": python_model("string_identity"),
    })  # fmt: skip
    cert, key = str(root / "server.pem"), str(root / "server.key")
    args = ["--model-control-mode=poll", "--repository-poll-secs=1", f"--auth-config={root / 'auth.yaml'}",
            "--http-restricted-api=logging:admin-secret=s3cret", "--http-ssl-certfile", cert, "--http-ssl-keyfile", key,
            "--grpc-use-ssl=true", "--grpc-server-cert", cert, "--grpc-server-key", key]  # fmt: skip
    proc = TlsServer([repo], args)
    proc.ca = str(root / "ca.pem")
    proc.start()
    yield proc
    proc.stop()


def call(server: TlsServer, method: str, path: str, tenant: str | None = None, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"} if tenant else {}
    context = ssl.create_default_context(cafile=server.ca)
    return json_call(f"https://localhost:{server.http_port}{path}", method, body, headers, 30, context)


def ready(server: TlsServer) -> int:
    return call(server, "GET", "/v2/health/ready")[0]


def test_the_startup_summary_names_models_endpoints_access_and_poll(server: TlsServer) -> None:
    log = server.log()
    block = log[log.index("serving:\n") :]
    assert re.search(r"\| add_sub +\| 1 +\| READY +\|", block)
    assert re.search(r"\| string_identity +\| 1 +\| READY +\|", block)
    for line in (
        f"HTTP .+ https://127.0.0.1:{server.http_port}\n",
        f"gRPC .+ grpcs://127.0.0.1:{server.grpc_port}\n",
        f"metrics .+ https://127.0.0.1:{server.metrics_port}/metrics\n",
        r"API keys .+ on: 3 tenant\(s\) \(alice, bob, ops\) from .+auth.yaml\n",
        r"restricted groups HTTP .+ logging\n",
        r"restricted groups gRPC .+ none\n",
        rf"model control .+ poll on, watching {re.escape(str(server.repositories[0].resolve()))} \(rescan every 1 s\)",
    ):
        assert re.search(line, block), line
    assert f"started HTTP frontend at https://127.0.0.1:{server.http_port}" in log


def test_the_startup_summary_is_a_block_whose_names_cannot_forge_log_lines(tmp_path: Path) -> None:
    """The summary keeps its own line breaks (log lines escape control characters); a model whose
    directory name holds a line break is listed on one row, escaped."""
    forged = "add\nE0101 00:00:00.000000 1 forged.py:1] FORGED"
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub(), forged: models.add_sub()})
    with ServerProcess([repo], ["--exit-on-error=false", "--strict-readiness=false"]) as srv:
        log = srv.log()
    block = log[log.index("serving:\n") :].split("\n")
    assert block[1].startswith("  +---") and block[3].startswith("  +---"), block  # indented, as a traceback
    assert any(re.match(r"  \| add_sub +\| 1 +\| READY +\|", line) for line in block), block
    assert any(line.startswith("  | add\\nE0101 00:00:00.000000 1 forged.py:1] FORGED ") for line in block), block
    assert not any(line.startswith(("E0101", "FORGED")) for line in log.split("\n")), log


def _add_model(repo: Path, name: str, files: dict[str, str]) -> None:
    """Write the model next to the repository, then move it in at once (as a user's ``cp`` ends)."""
    staged = write_repository(repo.parent / "staging", {name: files}) / name
    shutil.move(str(staged), repo / name)


def test_a_broken_model_added_under_poll_leaves_the_server_ready(server: TlsServer) -> None:
    repo = server.repositories[0]
    typo = models.ADD_SUB_CONFIG.replace(
        'TYPE_FP32 dims: [ 4 ] },\n  { name: "INPUT1"', 'TYPE_STRNG dims: [ 4 ] },\n  { name: "INPUT1"'
    )
    _add_model(repo, "add_typo", python_model("string_identity", config=typo))
    _add_model(repo, "add_failing", {"config.pbtxt": models.ADD_SUB_CONFIG, "1/model.py": FAILING_PY})
    deadline, rows = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        status, index = call(server, "POST", "/v2/repository/index", "ops", {})
        assert status == 200, index
        rows = {r["name"]: r for r in index}
        if all(rows.get(n, {}).get("state") == "UNAVAILABLE" for n in ("add_typo", "add_failing")):
            break
        time.sleep(0.2)
    assert "unknown value 'TYPE_STRNG' for DataType" in rows["add_typo"]["reason"], rows
    assert "cannot open the weights" in rows["add_failing"]["reason"], rows
    assert ready(server) == 200
    log = server.log()
    for name in ("add_typo", "add_failing"):
        assert f"model '{name}' appeared under poll and failed to load: it is UNAVAILABLE" in log
    # fixing the files loads the model on the next change
    (repo / "add_typo" / "config.pbtxt").write_text(models.ADD_SUB_CONFIG)
    (repo / "add_typo" / "1" / "model.py").write_text(models.add_sub_py(0))
    deadline = time.monotonic() + 60
    while call(server, "GET", "/v2/models/add_typo/ready", "alice")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert call(server, "GET", "/v2/models/add_typo/ready", "alice")[0] == 200
    assert ready(server) == 200


def test_unknown_model_hints_suggest_only_what_the_tenant_may_see(server: TlsServer) -> None:
    status, body = call(server, "GET", "/v2/models/add_sb", "alice")  # visible to alice's add_*: not found
    assert (status, body["error"]) == (404, "Request for unknown model: 'add_sb' is not found; did you mean 'add_sub'?")
    status, body = call(server, "GET", "/v2/models/add_sb", "bob")  # bob may not see add_sub: no hint
    assert (status, body["error"]) == (404, "Request for unknown model: 'add_sb' is not found")
    status, body = call(server, "GET", "/v2/models/string_identiy", "bob")  # refused by bob's tenant, hinted
    assert (status, body["error"]) == (404, "Request for unknown model: 'string_identiy' is not found; "
                                            "did you mean 'string_identity'?")  # fmt: skip
    status, body = call(server, "GET", "/v2/models/strin_identity", "alice")  # exists, alice may not see it
    assert "did you mean" not in body["error"] and status == 404

    tensor = {"name": "INPUT0", "datatype": "FP33", "shape": [1, 4], "data": [1, 2, 3, 4]}
    status, body = call(server, "POST", "/v2/models/add_sub/infer", "alice", {"inputs": [tensor]})
    assert status == 400
    assert body["error"] == ("invalid datatype for input INPUT0: 'FP33'; did you mean 'FP32'? expected one of BOOL, "
                             "UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16")  # fmt: skip

    client = grpcclient.InferenceServerClient(f"localhost:{server.grpc_port}", ssl=True,
                                              root_certificates=server.ca)  # fmt: skip
    inputs = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor_in in inputs:
        tensor_in.set_data_from_numpy(np.ones((1, 4), np.float32))
    try:
        with pytest.raises(InferenceServerException) as exc:
            client.infer("add_sb", inputs, headers={"authorization": "Bearer alice-key"})
        assert exc.value.message() == "Request for unknown model: 'add_sb' is not found; did you mean 'add_sub'?"
        with pytest.raises(InferenceServerException) as exc:
            client.infer("add_sb", inputs, headers={"authorization": "Bearer bob-key"})
        assert exc.value.message() == "Request for unknown model: 'add_sb' is not found"
    finally:
        client.close()


def test_ctrl_c_stops_each_frontend_once_and_says_what_it_unloaded(server: TlsServer) -> None:
    assert server.proc is not None
    started = len(server.log_path.read_bytes())
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(60) == 0
    tail = server.log_path.read_bytes()[started:].decode(errors="replace")
    for name in ("HTTP", "gRPC", "metrics"):
        assert tail.count(f"stopped {name} frontend\n") == 1, tail
    assert re.search(r"unloaded 3 models; inferd stopped in \d+\.\d\d s\n$", tail), tail
    assert "Shutting down" not in tail and "Traceback" not in tail, tail
