"""Shared-memory registration opens ``/dev/shm/<key>`` as glibc's ``shm_open`` does (what Triton
uses): ``O_NOFOLLOW``, and only a regular file of the shared-memory file system. A symbolic link
planted in ``/dev/shm`` would otherwise let a client read any file the server can read (through an
input region) and overwrite it (through an output region).

Triton answers a key ``shm_open`` cannot open with INTERNAL (HTTP 500) and
"Unable to open shared memory region: '<key>'"; inferd says the same, then why, after '; '.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.servers import Servers
from tests.triton_clients import error_of

SECRET = b"the server's private key: do not map me into a client's region!!"
_keys = itertools.count()
Client = httpclient.InferenceServerClient | grpcclient.InferenceServerClient


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()})


@pytest.fixture(params=["http", "grpc"])
def client(server: ServerProcess, request: pytest.FixtureRequest) -> Iterator[Client]:
    c: Client
    if request.param == "http":
        c = httpclient.InferenceServerClient(server.http_url)
    else:
        c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture
def planted() -> Iterator[Callable[[Callable[[str], None]], str]]:
    """``planted(make)``: calls ``make(path)`` for a fresh ``/dev/shm`` path and returns its key;
    everything made is removed after."""
    paths: list[str] = []

    def plant(make: Callable[[str], None]) -> str:
        name = f"inferd_attack_{os.getpid()}_{next(_keys)}"
        paths.append(os.path.join("/dev/shm", name))
        make(paths[-1])
        return "/" + name

    yield plant
    for path in paths:
        if os.path.lexists(path):
            os.unlink(path)


def _internal(client: Client) -> str:
    return "500" if isinstance(client, httpclient.InferenceServerClient) else "StatusCode.INTERNAL"


def _regions(client: Client) -> list[str]:
    if isinstance(client, httpclient.InferenceServerClient):
        return [r["name"] for r in client.get_system_shared_memory_status()]
    return list(client.get_system_shared_memory_status(as_json=True).get("regions", {}))


def test_a_symbolic_link_in_dev_shm_is_not_followed(client: Client, planted: Any, tmp_path: Path) -> None:
    secret = tmp_path / "secret.key"
    secret.write_bytes(SECRET)
    key = planted(lambda path: os.symlink(secret, path))
    status, message = error_of(lambda: client.register_system_shared_memory("stolen", key, 16))
    assert status == _internal(client)
    assert message.startswith(f"Unable to open shared memory region: '{key}'; registering region 'stolen': ")
    assert "symbolic link" in message
    assert "stolen" not in _regions(client)
    assert secret.read_bytes() == SECRET and client.is_server_live()


def test_only_regular_files_are_shared_memory(client: Client, planted: Any) -> None:
    key = planted(os.mkfifo)
    status, message = error_of(lambda: client.register_system_shared_memory("fifo", key, 16))
    assert status == _internal(client)
    assert message.startswith(f"Unable to open shared memory region: '{key}'; registering region 'fifo': ")
    assert "not a regular file" in message
    assert "fifo" not in _regions(client)


def test_a_key_is_one_name(client: Client) -> None:
    for key in ("//inferd_x", "/a/b", "/..", "/a\nb"):
        status, message = error_of(lambda key=key: client.register_system_shared_memory("k", key, 16))
        assert status == _internal(client)
        assert message.startswith("Unable to open shared memory region: '")
        assert "a key is one name" in message


def test_region_names_are_names(server: ServerProcess) -> None:
    """gRPC carries any string as a region name; one that is no name is refused (HTTP cannot send '/')."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    key = f"/inferd_attack_{os.getpid()}_ok"
    handle = shm.create_shared_memory_region("ok", key, 64)
    try:
        for name in ("a/b", "..", "a\nb", ""):
            status, message = error_of(lambda name=name: client.register_system_shared_memory(name, key, 64))
            assert status == "StatusCode.INVALID_ARGUMENT"
            assert message.startswith(f"failed to register shared memory region '{name}'; the name is not valid: ")
        client.register_system_shared_memory("ok", key, 64)  # a real region still registers
        assert _regions(client) == ["ok"]
    finally:
        client.unregister_system_shared_memory()
        client.close()
        shm.destroy_shared_memory_region(handle)
