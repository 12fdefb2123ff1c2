"""The test kit itself: the identity plugin, the backend contract (in-process) and the fixtures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from inferd.config import parse_config_text
from inferd.contracts.errors import ConfigError
from inferd.testing import (
    BackendContract,
    ContractModel,
    IdentityBackend,
    InputSpec,
    identity_config,
    identity_plugin,
    make_inputs,
    write_repository,
)
from inferd.testing.identity import identity_pairs


def _identity(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name.replace("INPUT", "OUTPUT"): value for name, value in inputs.items()}


class TestIdentityContract(BackendContract):
    """A batching identity model with three datatypes, on an in-process server."""

    plugins = [identity_plugin]
    inputs = [
        InputSpec("INPUT0", "FP32", (4,)),
        InputSpec("INPUT1", "INT64", (2, 3)),
        InputSpec("INPUT2", "BYTES", (2,)),
    ]

    def contract_repository(self, root: Path) -> ContractModel:
        config = identity_config(
            "identity", [("TYPE_FP32", [4]), ("TYPE_INT64", [2, 3]), ("TYPE_STRING", [2])], max_batch_size=8
        )
        write_repository(root, {"identity": {"config.pbtxt": config, "1/.keep": ""}})
        return ContractModel("identity", _identity)


class TestIdentityContractNoBatching(BackendContract):
    """A model without a batch dimension (max_batch_size 0) and a variable dimension."""

    plugins = [identity_plugin]
    inputs = [InputSpec("INPUT0", "UINT8", (3, 5))]

    def contract_repository(self, root: Path) -> tuple[str, object]:
        config = identity_config("plain", [("TYPE_UINT8", [-1, 5])], max_batch_size=0)
        write_repository(root, {"plain": {"config.pbtxt": config, "1/.keep": ""}})
        return "plain", _identity


# -- the pieces on their own ------------------------------------------------------------------------


def test_identity_pairs_must_agree():
    good = parse_config_text(identity_config("m", [("TYPE_FP32", [2])]), "test")
    assert identity_pairs(good) == [("INPUT0", "OUTPUT0")]
    bad = parse_config_text(
        'name: "m" input [{ name: "A" data_type: TYPE_FP32 dims: [2] }] '
        'output [{ name: "B" data_type: TYPE_INT32 dims: [2] }]',
        "test",
    )
    with pytest.raises(ConfigError, match="output 0 'B' must have the datatype and dims of input 0 'A'"):
        identity_pairs(bad)


def test_identity_autocomplete_mirrors_inputs():
    config = parse_config_text('name: "m" input [{ name: "X" data_type: TYPE_INT8 dims: [3] }]', "test")
    IdentityBackend().autocomplete_config(config, Path("."), None)
    assert [(o.name, list(o.dims)) for o in config.output] == [("OUTPUT0", [3])]


def test_make_inputs_is_deterministic():
    specs = [InputSpec("A", "FP16", (2,)), InputSpec("B", "BOOL", (3,)), InputSpec("C", "BYTES", (1,))]
    a, b = make_inputs(specs, 2, seed=3), make_inputs(specs, 2, seed=3)
    assert a["A"].dtype == np.float16 and a["A"].shape == (2, 2)
    assert a["B"].dtype == np.bool_ and a["C"].dtype == np.object_
    np.testing.assert_array_equal(a["A"], b["A"])
    assert make_inputs(specs, None)["A"].shape == (2,)


def test_inferd_server_fixture_in_process(model_repository, inferd_server):
    repo = model_repository({"echo": {"config.pbtxt": identity_config("echo", [("TYPE_INT32", [2])]), "1/.keep": ""}})
    server = inferd_server(repo, plugins=[identity_plugin])
    client = httpclient.InferenceServerClient(server.http_url)
    data = np.array([[1, 2]], dtype=np.int32)
    tensor = httpclient.InferInput("INPUT0", [1, 2], "INT32")
    tensor.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("OUTPUT0"), data)
    client.close()


def test_pytest_plugins_exposes_the_fixtures(tmp_path: Path):
    """A project that lists ``inferd.testing`` in ``pytest_plugins`` gets the fixtures."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["inferd.testing"]\n')
    (tmp_path / "test_it.py").write_text(
        "def test_it(model_repository, inferd_server):\n"
        "    repo = model_repository({'m': {'config.pbtxt': 'name: \"m\"'}})\n"
        "    assert (repo / 'm' / 'config.pbtxt').is_file()\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _servers_of(srv: Any) -> list[int]:
    """Pids of ``inferd serve`` processes with ``srv``'s command line (its ports file is its own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and str(srv.ports_path).encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def test_server_process_started_then_entered_is_one_server_and_stops(tmp_path: Path) -> None:
    from inferd.testing import ServerProcess
    from tests.e2e.models import add_sub

    repo = write_repository(tmp_path / "models", {"add_sub": add_sub()})
    with ServerProcess([repo]).start() as srv:
        assert _servers_of(srv) == [srv.proc.pid]
        ports = {"http": srv.http_port, "grpc": srv.grpc_port, "metrics": srv.metrics_port}
        assert 0 not in ports.values() and ports.items() <= srv.ports.items()  # the system's picks, read back
    assert srv.proc.poll() is not None
    assert _servers_of(srv) == []
