"""``inferd health grpcs://host:port``: the gRPC probe over TLS, verified with ``--cacert``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferd.testing import write_repository
from tests.e2e import models
from tests.e2e.tls_server import TlsServer

trustme = pytest.importorskip("trustme")


def test_health_over_grpc_with_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    leaf = ca.issue_cert("localhost")
    (tmp_path / "server.pem").write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(tmp_path / "server.key")
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    cert, key = str(tmp_path / "server.pem"), str(tmp_path / "server.key")
    args = ["--http-ssl-certfile", cert, "--http-ssl-keyfile", key]
    args += ["--grpc-use-ssl=true", "--grpc-server-cert", cert, "--grpc-server-key", key]
    server = TlsServer([repo], args)
    server.ca = str(tmp_path / "ca.pem")
    with server:
        url = f"grpcs://localhost:{server.grpc_port}"
        command = [sys.executable, "-m", "inferd.host.cli", "health", url, "--timeout", "10"]
        verified = subprocess.run([*command, "--cacert", server.ca], capture_output=True, text=True, timeout=60)
        unverified = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith(f"{url}: live yes, ready yes")
    assert unverified.returncode == 3 and "Traceback" not in unverified.stderr
