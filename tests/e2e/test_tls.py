"""TLS on every port: gRPC (both transports; Triton's flags) and HTTP and metrics (--http-ssl-*), with
certificates made on the fly (trustme). Real clients over real sockets, and the refusals: a client
without a certificate under mutual TLS, a clear-text client, a wrong host, an expired certificate,
garbage and a handshake that stops half-way; certificate files that cannot start a server."""

from __future__ import annotations

import datetime
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.host import cli
from inferd.serving import tls
from inferd.testing import ServerProcess, write_repository
from tests.e2e import models
from tests.e2e.tls_server import TlsServer, client_context
from tests.e2e.whoami import WHOAMI
from tests.waiting import wait_for

trustme = pytest.importorskip("trustme")


@dataclass
class Pki:
    """A CA, a server certificate for ``localhost`` only, client certificates, and bad files."""

    dir: Path
    ca: trustme.CA

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def issue(self, name: str, *hosts: str, ca: trustme.CA | None = None, expired: bool = False) -> None:
        """``<name>.pem`` (the chain) and ``<name>.key``."""
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
        when = {"not_before": past - datetime.timedelta(days=30), "not_after": past} if expired else {}
        leaf = (ca or self.ca).issue_cert(*hosts, **when)
        (self.dir / f"{name}.pem").write_bytes(b"".join(p.bytes() for p in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(self.dir / f"{name}.key")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"), trustme.CA())
    pki.ca.cert_pem.write_to_path(pki.dir / "ca.pem")
    pki.issue("server", "localhost")
    pki.issue("client", "client@example.com")
    other = trustme.CA()
    other.cert_pem.write_to_path(pki.dir / "other-ca.pem")
    pki.issue("stranger", "client@example.com", ca=other)
    pki.issue("other-server", "localhost", ca=other)
    pki.issue("expired", "localhost", expired=True)
    (pki.dir / "garbage.pem").write_bytes(b"not a certificate\n")
    return pki


#: What tritonclient.http raises when the server ends the connection: a TLS alert, or closed (TLS 1.3
#: checks the client's certificate after the client thinks the handshake is done).
REFUSED = (ssl.SSLError, ConnectionError, http.client.HTTPException)

#: name -> (gRPC transport, mutual TLS on gRPC and HTTP)
SERVERS = {
    "h2": ("h2", False),
    "h2-mutual": ("h2", True),
    "grpcio": ("grpcio", False),
    "grpcio-mutual": ("grpcio", True),
}


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: pytest.FixtureRequest, pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    transport, mutual = SERVERS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    for name in ("server.pem", "server.key"):  # the server's own copies: the reload test replaces them
        shutil.copy(pki.dir / name, root / name)
    repo = write_repository(root / "models", {"add_sub": models.add_sub()})
    cert, key, ca = str(root / "server.pem"), str(root / "server.key"), pki.path("ca.pem")
    args = ["--grpc-transport", transport, "--grpc-server-cert", cert, "--grpc-server-key", key,
            "--grpc-root-cert", ca, "--http-ssl-certfile", cert, "--http-ssl-keyfile", key,
            "--grpc-use-ssl-mutual=true" if mutual else "--grpc-use-ssl=true"]  # fmt: skip
    if mutual:
        args += ["--http-ssl-ca-certs", ca, "--http-ssl-verify-client=true"]
    proc = TlsServer([repo], args)
    proc.ca, proc.client_cert = ca, pki.path("client") if mutual else None
    proc.mutual = mutual  # type: ignore[attr-defined]
    proc.dir = root  # type: ignore[attr-defined]
    yield proc.start()
    proc.stop()


#: A new gRPC client makes its own connection (not one from grpc's process-wide pool).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def grpc_client(
    srv: TlsServer, host: str = "localhost", ca: str | None = None, cert: str | None = ""
) -> grpcclient.InferenceServerClient:
    """A TLS gRPC client; ``cert`` ``""``: the server's usual client certificate, ``None``: none."""
    cert = srv.client_cert if cert == "" else cert
    keys = {"private_key": cert + ".key", "certificate_chain": cert + ".pem"} if cert else {}
    return grpcclient.InferenceServerClient(f"{host}:{srv.grpc_port}", ssl=True, root_certificates=ca or srv.ca,
                                            channel_args=OWN_CONNECTION, **keys)  # fmt: skip


def http_client(
    srv: TlsServer, host: str = "localhost", ca: str | None = None, cert: str | None = ""
) -> httpclient.InferenceServerClient:
    cert = srv.client_cert if cert == "" else cert
    factory = client_context(ca or srv.ca, cert)
    return httpclient.InferenceServerClient(
        f"{host}:{srv.http_port}", ssl=True, ssl_context_factory=factory, insecure=False
    )


def add_sub(client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient) -> None:
    """An add_sub inference through ``client``, checked against numpy."""
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    a, b = np.arange(4, dtype=np.float32).reshape(1, 4), np.full((1, 4), 0.5, np.float32)
    inputs = [mod.InferInput("INPUT0", [1, 4], "FP32"), mod.InferInput("INPUT1", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def assert_healthy(srv: TlsServer) -> None:
    assert srv.proc is not None and srv.proc.poll() is None
    add_sub(http_client(srv))
    with grpc_client(srv) as client:
        add_sub(client)


def test_inference_over_tls_on_http_grpc_and_metrics(server: TlsServer) -> None:
    assert_healthy(server)
    with grpc_client(server) as client:
        assert client.is_server_ready() and client.get_model_metadata("add_sub").name == "add_sub"
    assert http_client(server).get_server_metadata()["name"] == "inferd"
    context = client_context(server.ca, server.client_cert)()
    with urllib.request.urlopen(f"https://localhost:{server.metrics_port}/metrics", context=context, timeout=5) as r:
        assert b'nv_inference_request_success{model="add_sub",version="1"}' in r.read()


def test_mutual_tls_refuses_a_client_without_a_valid_certificate(server: TlsServer, pki: Pki) -> None:
    if not server.mutual:  # type: ignore[attr-defined]
        pytest.skip("mutual TLS is off on this server")
    for cert in (None, pki.path("stranger")):  # none, and one another CA signed
        with grpc_client(server, cert=cert) as client, pytest.raises(InferenceServerException) as exc:
            client.is_server_live()
        assert exc.value.status() == "StatusCode.UNAVAILABLE"
        with pytest.raises(REFUSED):
            http_client(server, cert=cert).is_server_live()
    assert_healthy(server)


def test_a_clear_text_client_fails_cleanly_and_the_server_stays_up(server: TlsServer) -> None:
    plain = grpcclient.InferenceServerClient(f"localhost:{server.grpc_port}", channel_args=OWN_CONNECTION)
    with plain as client, pytest.raises(InferenceServerException) as exc:
        client.is_server_live()
    assert exc.value.status() == "StatusCode.UNAVAILABLE"
    with pytest.raises(REFUSED):
        httpclient.InferenceServerClient(f"localhost:{server.http_port}").is_server_live()
    assert_healthy(server)


def test_the_client_refuses_a_certificate_for_another_host_or_from_another_ca(server: TlsServer, pki: Pki) -> None:
    # The certificate names localhost only: 127.0.0.1 is another host to the client.
    with grpc_client(server, host="127.0.0.1") as client, pytest.raises(InferenceServerException) as exc:
        client.is_server_live()
    assert exc.value.status() == "StatusCode.UNAVAILABLE"
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        http_client(server, host="127.0.0.1").is_server_live()
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        http_client(server, ca=pki.path("other-ca.pem")).is_server_live()
    assert_healthy(server)


def client_hello() -> bytes:
    """The first flight of a real TLS client handshake."""
    obj = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def drained(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("port", ["http_port", "grpc_port", "metrics_port"])
def test_garbage_and_half_finished_handshakes_leave_the_server_healthy(server: TlsServer, port: str) -> None:
    address = ("127.0.0.1", getattr(server, port))
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\xff\xffGET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 8)
        assert b"HTTP" not in drained(sock)  # closed (after a TLS alert at most)
    hello = client_hello()
    with (
        socket.create_connection(address, timeout=10) as half,
        socket.create_connection(address, timeout=10) as stopped,
    ):
        half.sendall(hello[: len(hello) // 2])  # the client hello, cut short
        stopped.sendall(hello)
        assert stopped.recv(5)[:1] == b"\x16"  # the server's handshake answer; the client says no more
        assert_healthy(server)  # while both hang
    assert_healthy(server)


def swap_server_certificate(srv: TlsServer, pki: Pki, name: str) -> None:
    """Replace the server's certificate files with ``name``'s, as a rotation does (rename into place)."""
    root = srv.dir  # type: ignore[attr-defined]
    for ext in ("pem", "key"):
        shutil.copy(pki.dir / f"{name}.{ext}", root / f"new.{ext}")
        os.replace(root / f"new.{ext}", root / f"server.{ext}")


def grpc_trusts(srv: TlsServer, ca: str) -> bool:
    """Whether a new gRPC connection trusting only ``ca`` gets through."""
    with grpc_client(srv, ca=ca) as client:
        try:
            return bool(client.is_server_live())
        except InferenceServerException:
            return False


def http_trusts(srv: TlsServer, ca: str) -> bool:
    try:
        return bool(http_client(srv, ca=ca).is_server_live())
    except ssl.SSLError:
        return False


def test_certificates_reload_on_sighup_and_on_change_without_dropping_connections(server: TlsServer, pki: Pki) -> None:
    ca, other_ca = server.ca, pki.path("other-ca.pem")
    grpc_open, http_open = grpc_client(server), http_client(server)
    assert grpc_open.is_server_live() and http_open.is_server_live()  # connections made with the first certificate
    try:
        swap_server_certificate(server, pki, "other-server")
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)  # at once, for both ports
        wait_for(lambda: grpc_trusts(server, other_ca) and http_trusts(server, other_ca), "the other certificate")
        assert not grpc_trusts(server, ca) and not http_trusts(server, ca)
        add_sub(grpc_open)  # the open connections keep going on the old certificate
        add_sub(http_open)
        swap_server_certificate(server, pki, "expired")  # no signal: the change is seen by the next clients
        wait_for(lambda: not http_trusts(server, other_ca), "the expired certificate over HTTPS")
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
            http_client(server).is_server_live()
        wait_for(
            lambda: not grpc_trusts(server, ca) and not grpc_trusts(server, other_ca),
            "the expired certificate over gRPC",
        )
    finally:
        swap_server_certificate(server, pki, "server")
        server.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: grpc_trusts(server, ca) and http_trusts(server, ca), "the first certificate back")
    grpc_open.close()
    assert "TLS certificate reloaded from" in server.log()


def test_a_rotation_that_does_not_load_keeps_the_old_certificate(server: TlsServer, pki: Pki) -> None:
    root = server.dir  # type: ignore[attr-defined]
    shutil.copy(pki.dir / "other-server.key", root / "server.key")  # half-way: the key no longer matches
    try:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "the new TLS certificate files were not loaded" in server.log(), "the refusal in the log")
        assert_healthy(server)
    finally:
        shutil.copy(pki.dir / "server.key", root / "server.key")
        server.proc.send_signal(signal.SIGHUP)
    assert_healthy(server)


# -- files that cannot start a server ---------------------------------------------------------------


def encrypted_key(pki: Pki) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((pki.dir / "server.key").read_bytes(), password=None)
    path = pki.dir / "encrypted.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"secret")))  # fmt: skip
    return str(path)


def refusals(pki: Pki) -> list[tuple[list[str], str]]:
    """Command lines and the start of the error each must stop with."""
    p = pki.path
    grpc = ["--grpc-use-ssl=true", "--grpc-server-cert", p("server.pem")]
    http = ["--http-ssl-certfile", p("server.pem")]
    return [
        (["--grpc-use-ssl=true"], "--grpc-use-ssl=true needs --grpc-server-cert"),
        (grpc, "--grpc-use-ssl=true needs --grpc-server-key"),
        (["--grpc-use-ssl-mutual=true", *grpc[1:], "--grpc-server-key", p("server.key")],
         "--grpc-use-ssl-mutual=true needs --grpc-root-cert"),
        ([*grpc, "--grpc-server-key", p("missing.key")], f"--grpc-server-key {p('missing.key')}: cannot read the file: No such file"),
        ([*grpc, "--grpc-server-key", str(pki.dir)], f"--grpc-server-key {pki.dir}: cannot read the file: Is a directory"),
        ([*grpc, "--grpc-server-key", p("other-server.key")],
         f"--grpc-server-key {p('other-server.key')}: the private key does not match the certificate in "
         f"--grpc-server-cert {p('server.pem')}"),
        ([*grpc, "--grpc-server-key", p("server.pem")], f"--grpc-server-key {p('server.pem')}: no PEM private key found"),
        ([*grpc, "--grpc-server-key", p("server.key"), "--grpc-root-cert", p("garbage.pem")],
         f"--grpc-root-cert {p('garbage.pem')}: no PEM certificate found in the file"),
        (["--http-ssl-certfile", p("garbage.pem"), "--http-ssl-keyfile", p("server.key")],
         f"--http-ssl-certfile {p('garbage.pem')}: no PEM certificate found in the file"),
        ([*http, "--http-ssl-keyfile", encrypted_key(pki)], f"--http-ssl-keyfile {p('encrypted.key')}: the private key is encrypted"),
        (http, f"--http-ssl-certfile {p('server.pem')}: no PEM private key found"),  # no key, none in the file
        ([*http, "--http-ssl-keyfile", p("server.key"), "--http-ssl-verify-client=true"],
         "--http-ssl-verify-client=true needs --http-ssl-ca-certs"),
        (["--http-ssl-keyfile", p("server.key")], "--http-ssl-keyfile needs --http-ssl-certfile"),
    ]  # fmt: skip


def test_certificate_files_that_cannot_serve_stop_the_start_naming_flag_and_file(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    for argv, message in refusals(pki):
        assert cli.main(["serve", "--model-repository", str(repo), "--http-port", "0", *argv]) == 2, argv
        assert capsys.readouterr().err.startswith(f"inferd serve: error: {message}"), argv


def test_inferd_serve_exits_2_on_a_key_that_does_not_match(pki: Pki, tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"add_sub": models.add_sub()})
    args = [
        "--grpc-use-ssl=true",
        "--grpc-server-cert",
        pki.path("server.pem"),
        "--grpc-server-key",
        pki.path("other-server.key"),
    ]
    done = subprocess.run(ServerProcess([repo], args).command(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "the private key does not match the certificate in --grpc-server-cert" in done.stderr


def test_grpc_certificate_flags_without_tls_warn_as_triton_ignores_them(pki: Pki) -> None:
    values = {
        "grpc_use_ssl": False,
        "grpc_server_cert": pki.path("server.pem"),
        "grpc_server_key": pki.path("server.key"),
    }
    assert tls.warnings(values) == [
        "--grpc-server-cert is ignored: gRPC serves clear text unless --grpc-use-ssl=true",
        "--grpc-server-key is ignored: gRPC serves clear text unless --grpc-use-ssl=true",
    ]
    assert tls.warnings({**values, "grpc_use_ssl": True}) == []


# -- --workers N --------------------------------------------------------------------------------------


def served_by(client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient) -> int:
    """The pid of the worker that answered (the ``whoami`` model)."""
    mod = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    ms = mod.InferInput("MS", [1], "INT32")
    ms.set_data_from_numpy(np.array([0], np.int32))
    return int(client.infer("whoami", [ms]).as_numpy("PID")[0])


def test_workers_serve_tls_on_shared_ports_and_stop_promptly_with_idle_tls_clients(pki: Pki, tmp_path: Path) -> None:
    repo = write_repository(tmp_path / "models", {"whoami": WHOAMI})
    cert, key = pki.path("server.pem"), pki.path("server.key")
    srv = TlsServer([repo], ["--workers", "2", "--grpc-use-ssl=true", "--grpc-server-cert", cert, "--grpc-server-key", key,
                             "--http-ssl-certfile", cert, "--http-ssl-keyfile", key])  # fmt: skip
    srv.ca = pki.path("ca.pem")
    with srv:
        http_pids, grpc_pids = set(), set()
        for _ in range(60):  # each a new connection: the kernel picks the worker
            if len(http_pids) < 2:
                http_pids.add(served_by(http_client(srv)))
            if len(grpc_pids) < 2:
                with grpc_client(srv) as client:
                    grpc_pids.add(served_by(client))
        assert len(http_pids) == 2 and http_pids == grpc_pids
        idle_http, idle_grpc = http_client(srv), grpc_client(srv)  # keep-alive connections left idle
        assert idle_http.is_server_live() and idle_grpc.is_server_live()
        started = time.monotonic()
        assert srv.stop() == 0
        assert time.monotonic() - started < 10  # not the 30 s asyncio waits for a TLS client's goodbye
        idle_grpc.close()
