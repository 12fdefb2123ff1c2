"""Shared memory as Triton's own QA (``qa/L0_shared_memory``) sees it, against a real ``inferd serve``
with tritonclient: an output offset past the region, an empty key, an empty region name.

The sentences are what the real Triton 2.51 answered to the same requests (see each constant).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from inferd.testing import ServerProcess
from tests.e2e import models
from tests.http_calls import http_call
from tests.servers import Servers
from tests.triton_clients import error_of

# Observed from Triton 2.51 (HTTP 400 / gRPC INVALID_ARGUMENT) for an output offset of 2**64 - 32
# (QA's HTTP case: -32 as a signed 64-bit value), of 2**63 and of 64 in a 64-byte region.
INVALID_OFFSET = "Invalid offset for shared memory region: '{}'"
# Observed from Triton 2.51 (HTTP 500 / gRPC INTERNAL) for registering the key "" or "/".
UNABLE_TO_OPEN = "Unable to open shared memory region: '{}'"
# Observed from Triton 2.51 for an output byte size of 2**64 - 32 at offset 32 (HTTP 400).
INVALID_OFFSET_SIZE = "Invalid offset + byte size for shared memory region: '{}'"
PAGE = os.sysconf("SC_PAGE_SIZE")


def _post(server: ServerProcess, path: str, body: Any) -> tuple[int, bytes]:
    return http_call(f"http://{server.http_url}{path}", "POST", b"" if body is None else json.dumps(body).encode())


@pytest.fixture(scope="module")
def server(serve: Servers) -> ServerProcess:
    return serve({"add_sub": models.add_sub()})


@pytest.fixture
def region(server: ServerProcess) -> Iterator[str]:
    """A 64-byte region registered at offset one page into its object, as QA registers it, holding
    INPUT0 = INPUT1 = [1, 2, 3, 4] at 0 (the inputs read the same bytes)."""
    name = f"qa_{os.getpid()}"
    handle = shm.create_shared_memory_region(name, f"/{name}", PAGE + 64)
    shm.set_shared_memory_region(handle, [np.arange(1, 5, dtype=np.float32)], offset=PAGE)
    body = {"key": f"/{name}", "offset": PAGE, "byte_size": 64}
    assert _post(server, f"/v2/systemsharedmemory/region/{name}/register", body)[0] == 200
    yield name
    _post(server, "/v2/systemsharedmemory/unregister", None)
    shm.destroy_shared_memory_region(handle)


def _infer(server: ServerProcess, name: str, offset: Any, byte_size: Any = 16) -> tuple[int, str]:
    def tensor(n: str) -> dict[str, Any]:
        params = {"shared_memory_region": name, "shared_memory_byte_size": 16}
        return {"name": n, "datatype": "FP32", "shape": [1, 4], "parameters": params}

    out = {"shared_memory_region": name, "shared_memory_byte_size": byte_size, "shared_memory_offset": offset}
    body = {"inputs": [tensor("INPUT0"), tensor("INPUT1")], "outputs": [{"name": "OUTPUT0", "parameters": out}]}
    status, reply = _post(server, "/v2/models/add_sub/infer", body)
    return status, json.loads(reply).get("error", "") if status != 200 else ""


@pytest.mark.parametrize("offset", [2**64 - 32, 2**63, 64])
def test_an_output_offset_past_the_region_is_an_invalid_offset_over_http(
    server: ServerProcess, region: str, offset: int
) -> None:
    """Before any check of the parameter's type: 2**64 - 32 is an unsigned 64-bit offset, as Triton reads it."""
    assert _infer(server, region, offset) == (400, INVALID_OFFSET.format(region))


def test_an_output_byte_size_past_the_region_over_http(server: ServerProcess, region: str) -> None:
    status, message = _infer(server, region, 32, 2**64 - 32)
    assert (status, message.split("; ")[0]) == (400, INVALID_OFFSET_SIZE.format(region))


def test_an_output_offset_past_the_region_over_grpc(server: ServerProcess, region: str) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    ins = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in ins:
        tensor.set_shared_memory(region, 16)
    for offset in (64, 2**63 - 1):  # QA's gRPC case: one byte past the 64 bytes (the int64 field's limit)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory(region, 16, offset=offset)
        assert error_of(lambda o=out: client.infer("add_sub", ins, outputs=[o])) == (  # type: ignore[misc]
            "StatusCode.INVALID_ARGUMENT",
            INVALID_OFFSET.format(region),
        )
    client.close()


@pytest.mark.parametrize("key", ["", "/"])
def test_an_empty_key_cannot_be_opened(server: ServerProcess, key: str) -> None:
    status, reply = _post(server, "/v2/systemsharedmemory/region/empty/register", {"key": key, "byte_size": 64})
    assert status == 500
    assert json.loads(reply)["error"].startswith(UNABLE_TO_OPEN.format(key) + "; ")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    status_code, message = error_of(lambda: client.register_system_shared_memory("empty", key, 64))
    assert status_code == "StatusCode.INTERNAL" and message.startswith(UNABLE_TO_OPEN.format(key) + "; ")
    client.close()


def test_an_empty_region_name_is_refused(server: ServerProcess, region: str) -> None:
    """Triton 2.51 registers a region named "" (gRPC), which no status or unregister call can then
    name alone ("" means every region): inferd refuses the name (docs/configuration.md, differences)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    status_code, message = error_of(lambda: client.register_system_shared_memory("", f"/{region}", 64))
    assert status_code == "StatusCode.INVALID_ARGUMENT"
    assert message == "failed to register shared memory region ''; the name is not valid: a name cannot be empty"
    assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == [region]
    client.close()
