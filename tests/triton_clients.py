"""tritonclient in tests: a server's clients of both protocols, inputs built from arrays, and the
error a call must raise."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from inferd.testing import ServerProcess


def both_clients(server: ServerProcess) -> list[tuple[ModuleType, Any]]:
    """The HTTP and the gRPC client of ``server``, each with its tritonclient module."""
    return [
        (httpclient, httpclient.InferenceServerClient(server.http_url)),
        (grpcclient, grpcclient.InferenceServerClient(server.grpc_url)),
    ]


def tensor(name: str, array: np.ndarray, datatype: str, module: ModuleType = grpcclient) -> Any:
    """``module``'s ``InferInput`` ``name`` holding ``array`` as ``datatype``."""
    t = module.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array)
    return t


def inputs(module: ModuleType, arrays: Mapping[str, np.ndarray]) -> list[Any]:
    """``module``'s ``InferInput`` of each array by name, its datatype the array's."""
    return [tensor(name, array, np_to_triton_dtype(array.dtype), module) for name, array in arrays.items()]


def add_sub_inputs(
    module: ModuleType = grpcclient, a: np.ndarray | None = None, b: np.ndarray | None = None
) -> list[Any]:
    """INPUT0 = ``a`` and INPUT1 = ``b`` of the ``add_sub`` model (each FP32 ones of shape [1, 4]
    when not given)."""
    ones = np.ones((1, 4), np.float32)
    return inputs(module, {"INPUT0": ones if a is None else a, "INPUT1": ones if b is None else b})


def add_sub_call(client: Any, model: str = "add_sub", version: str = "") -> np.ndarray:
    """OUTPUT0 of ``add_sub`` (HTTP ``client``) for INPUT0 = INPUT1 = [[1, 2, 3, 4]]."""
    a = np.array([[1, 2, 3, 4]], np.float32)
    return client.infer(model, add_sub_inputs(httpclient, a, a), model_version=version).as_numpy("OUTPUT0")


def repository_index(client: Any) -> dict[tuple[str, str], tuple[str, str]]:
    """The repository index by (model, version): (state, reason)."""
    return {
        (m["name"], m.get("version", "")): (m.get("state", ""), m.get("reason", ""))
        for m in client.get_model_repository_index()
    }


def error_of(call: Callable[[], Any]) -> tuple[str, str]:
    """The status and message of the tritonclient error ``call()`` raises (the test fails if it
    raises none)."""
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.status()), str(info.value.message())
