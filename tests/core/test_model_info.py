"""DataPlane.resolve and ModelInfo: what frontends know of a model, resolved once per request.

An in-process server (no frontends listening) over a two-version add_sub; the HTTP application
and the gRPC service are driven directly, as their servers would drive them.
"""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import numpy as np
import pytest

from inferd.api import DataPlane, ModelMetadata
from inferd.contracts.errors import Unavailable
from inferd.contracts.model_info import ModelInfo, TensorInfo
from inferd.contracts.types import InferRequest, InferTensor
from inferd.dataplane import LocalDataPlane
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.codec import split_infer_request
from inferd.frontends.grpc.service import InferenceService
from inferd.frontends.http.app import HttpApp
from inferd.host.server import Server, ServerOptions
from tests.asgi_calls import http_post
from tests.in_process import A, B, serve


def add_sub_request(version: str = "") -> InferRequest:
    request = InferRequest("add_sub", version)
    for name, values in (("INPUT0", A), ("INPUT1", B)):
        request.inputs[name] = InferTensor(name, "FP32", (1, 4), np.array([values], dtype=np.float32))
    return request


def count_resolves(dp: LocalDataPlane) -> list[str]:
    """Record every model resolution the model table answers from now on."""
    calls: list[str] = []
    resolve = type(dp.table).resolve.__get__(dp.table)  # the model table's own, never a wrapper

    def counting(name: str, version: str = "") -> Any:
        calls.append(name)
        return resolve(name, version)

    dp.table.resolve = counting  # type: ignore[method-assign]
    return calls


def grpc_request(version: str = "") -> Any:
    message = pb.ModelInferRequest(model_name="add_sub", model_version=version)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="FP32", shape=[1, 4])
    message.raw_input_contents.extend([np.array(A, np.float32).tobytes(), np.array(B, np.float32).tobytes()])
    return split_infer_request(message.SerializeToString())


def test_model_info_describes_each_loaded_version(tmp_path):
    async def scenario(server: Server) -> None:
        dp = server.dataplane
        info = dp.resolve("add_sub", "1")
        assert isinstance(info, ModelInfo)
        assert (info.name, info.version, info.platform) == ("add_sub", 1, "python")
        tensors = ("INPUT0", "INPUT1"), ("OUTPUT0", "OUTPUT1")
        assert info.inputs == tuple(TensorInfo(n, "FP32", (-1, 4)) for n in tensors[0])
        assert info.outputs == tuple(TensorInfo(n, "FP32", (-1, 4)) for n in tensors[1])
        assert (info.max_batch_size, info.batching, info.decoupled) == (8, True, False)
        spec = info.input_spec("INPUT0")
        assert spec is not None and spec.dims == (4,)
        assert info.input_spec("nope") is None
        assert dp.resolve("add_sub", "1") is info  # built once per version, not per request
        assert dp.resolve("add_sub").version == 2
        assert dp.model_metadata("add_sub", "1") == ModelMetadata(
            "add_sub", ("1", "2"), "python",
            tuple(TensorInfo(n, "FP32", (-1, 4)) for n in tensors[0]),
            tuple(TensorInfo(n, "FP32", (-1, 4)) for n in tensors[1]),
        )  # fmt: skip

    serve(tmp_path, scenario)


def test_a_request_runs_on_the_version_it_was_resolved_for(tmp_path):
    async def scenario(server: Server) -> None:
        dp = server.dataplane
        version_one = dp.resolve("add_sub", "1")
        assert (await dp.infer(add_sub_request(), version_one)).model_version == "1"
        assert (await dp.infer(add_sub_request())).model_version == "2"  # no info: the request's model
        streamed = [r async for r in dp.stream(add_sub_request(), version_one)]
        assert [getattr(r, "model_version", r) for r in streamed] == ["1"]

    serve(tmp_path, scenario)


def test_an_unloaded_version_is_not_kept_alive_by_its_description(tmp_path):
    kept: list[ModelInfo] = []

    async def scenario(server: Server) -> None:
        kept.append(server.dataplane.resolve("add_sub", "1"))
        assert kept[0].handle() is not None

    serve(tmp_path, scenario)  # stops the server: every version unloads
    gc.collect()
    assert kept[0].handle() is None

    async def late(dp: DataPlane) -> None:
        with pytest.raises(Unavailable) as err:  # a request never runs on an unloaded version
            await dp.infer(add_sub_request(), kept[0])
        assert err.value.message == "model 'add_sub' version 1 is no longer loaded"

    async def main() -> None:
        server = Server(ServerOptions([tmp_path / "models"], allow_http=False, allow_grpc=False, allow_metrics=False))
        await late(server.dataplane)

    asyncio.run(main())


def test_every_frontend_route_resolves_the_model_once(tmp_path):
    async def scenario(server: Server) -> None:
        dp = server.dataplane
        app, svc = HttpApp(dp), InferenceService(dp)
        infer = json.dumps({"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 4], "data": d}
                                       for n, d in (("INPUT0", A), ("INPUT1", B))]}).encode()  # fmt: skip
        generate = json.dumps({"INPUT0": A, "INPUT1": B}).encode()
        streamed: list[Any] = []

        async def put(item: Any) -> None:
            streamed.append(item)

        routes = {
            "http infer": lambda: http_post(app, "/v2/models/add_sub/infer", infer),
            "http versioned infer": lambda: http_post(app, "/v2/models/add_sub/versions/1/infer", infer),
            "http generate": lambda: http_post(app, "/v2/models/add_sub/generate", generate),
            "http generate_stream": lambda: http_post(app, "/v2/models/add_sub/generate_stream", generate),
            "grpc infer": lambda: svc.ModelInfer(grpc_request("1")),
            "grpc stream": lambda: svc.stream_one(grpc_request(), put),
        }
        for route, call in routes.items():
            calls = count_resolves(server.local)
            result = await call()
            if isinstance(result, tuple):
                assert result[0] == 200, (route, result)
            assert calls == ["add_sub"], route
        assert [type(item).__name__ for item in streamed] == ["WireResponse"]  # no error

    serve(tmp_path, scenario)
