"""Frontends reach the server only through ``inferd.api.DataPlane``.

Every built-in frontend (HTTP, gRPC, metrics) and the OpenAI plugin's app is run here over a
facade that has the interface's names and nothing else, against a real in-process server: a
frontend that reads a host internal (the model table, ``access``, a private check) fails with
``AttributeError``. A backend of this file declares the typed catalog hook (``Model.lora_adapters``,
``Model.chat_engine``), which the OpenAI frontend lists without touching the backend's objects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from inferd.api import (
    Backend,
    DataPlane,
    Instance,
    InstanceSpec,
    Model,
    ModelLoadContext,
    ServedModel,
    SyncInstance,
    hookimpl,
)
from inferd.auth import access_from_flags, digest
from inferd.contracts.errors import InferdError
from inferd.contracts.hookspecs import BackendRegister
from inferd.contracts.types import InferRequest, InferResponse
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.service import RPCS, InferenceService
from inferd.frontends.http.app import HttpApp
from inferd.frontends.metrics.frontend import MetricsFrontend
from inferd.frontends.metrics.latency import LatencyConfig
from inferd.host.plugins import PluginHost
from inferd.host.server import Server, ServerOptions
from inferd.testing import write_repository
from tests.asgi_calls import http_post

TEXT_CONFIG = """
name: "%s"
backend: "catalogued"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


class Engine:
    """A chat engine as a backend offers it (``inferd.api.ChatEngine``): only its context length is read here."""

    tokenizer: Any = None
    max_model_len = 4096

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        raise NotImplementedError

    def tool_request(self, body: dict[str, Any], tool_parser: str | None) -> Any:
        raise NotImplementedError

    def tool_calls(self, prepared: Any, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        raise NotImplementedError


class Silent(SyncInstance):
    def execute(self, requests: Sequence[InferRequest]) -> list[InferResponse]:
        raise NotImplementedError  # nothing here runs a request


class CataloguedModel(Model):
    """Declares the catalog hook: two LoRA adapters and its own chat engine."""

    lora_adapters = ("sql", "poem")
    chat_engine = Engine()

    def create_instance(self, spec: InstanceSpec) -> Instance:
        return Silent()


class CataloguedBackend(Backend):
    name = "catalogued"

    def load_model(self, context: ModelLoadContext) -> Model:
        return CataloguedModel()


class Plugin:
    @hookimpl
    def inferd_register_backends(self, register: BackendRegister) -> None:
        register("catalogued", CataloguedBackend)


def _forward(name: str) -> Any:
    if isinstance(getattr(DataPlane, name), property):
        return property(lambda self: getattr(self._inner, name))

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    return call


#: The interface and nothing else: every abstract member forwarded, the request path bound.
OnlyTheInterface = type(
    "OnlyTheInterface",
    (DataPlane,),
    {
        "__slots__": ("_inner", "resolve", "infer", "stream"),
        **{name: _forward(name) for name in DataPlane.__abstractmethods__},
    },  # fmt: skip
)


def facade(inner: DataPlane) -> DataPlane:
    plane: Any = OnlyTheInterface()
    plane._inner, plane.resolve, plane.infer, plane.stream = inner, inner.resolve, inner.infer, inner.stream
    return plane  # type: ignore[no-any-return]


def serve(tmp_path: Path, scenario: Callable[[Server], Awaitable[None]], auth_config: Path | None = None) -> None:
    repo = write_repository(tmp_path / "models", {"llm": {"config.pbtxt": TEXT_CONFIG % "llm", "1/.keep": ""}})

    async def main() -> None:
        options = ServerOptions([repo], allow_http=False, allow_grpc=False, allow_metrics=False)
        access = access_from_flags((), (), str(auth_config)) if auth_config is not None else None
        server = Server(options, PluginHost(load_entrypoints=False, plugins=[Plugin()]), access=access)
        await server.start()
        try:
            await scenario(server)
        finally:
            await server.stop()

    asyncio.run(main())


async def get(app: Any, path: str) -> tuple[int, Any]:
    status, body = await http_post(app, path, b"", "GET")
    return status, json.loads(body) if body else None


def test_the_http_grpc_and_metrics_frontends_use_only_the_interface(tmp_path: Path) -> None:
    async def scenario(server: Server) -> None:
        dp = facade(server.dataplane)
        app = HttpApp(dp)
        assert (await get(app, "/v2"))[1]["name"] == "inferd"
        assert await get(app, "/v2/health/ready") == (200, None)
        assert (await get(app, "/v2/models/llm"))[1]["versions"] == ["1"]
        assert (await get(app, "/v2/models/llm/config"))[1]["backend"] == "catalogued"
        assert [s["name"] for s in (await get(app, "/v2/models/stats"))[1]["model_stats"]] == ["llm"]
        assert await http_post(app, "/v2/repository/index", b"{}") == (
            200, b'[{"name":"llm","version":"1","state":"READY"}]'
        )  # fmt: skip
        assert (await get(app, "/v2/trace/setting"))[1]["trace_mode"] == "triton"
        assert (await get(app, "/v2/logging"))[1]["log_verbose_level"] == 0
        assert (await get(app, "/v2/models/llm/traffic"))[1] == {"model": "llm", "weights": {}, "versions": {}}
        status, body = await http_post(app, "/v2/repository/models/llm/load", b"{}")
        assert status == 503 and b"explicit model load / unload is not allowed" in body  # the control mode

        svc = InferenceService(dp)
        assert (await svc.ServerMetadata(pb.ServerMetadataRequest())).name == "inferd"
        meta = await svc.ModelMetadata(pb.ModelMetadataRequest(name="llm"))
        assert [t.name for t in meta.inputs] == ["text_input"] and list(meta.inputs[0].shape) == [1]
        index = await svc.RepositoryIndex(pb.RepositoryIndexRequest())
        assert [(m.name, m.version, m.state) for m in index.models] == [("llm", "1", "READY")]
        stats = await svc.ModelStatistics(pb.ModelStatisticsRequest(name="llm"))
        assert [(s.name, s.version, s.inference_count) for s in stats.model_stats] == [("llm", "1", 0)]
        logs = await svc.LogSettings(pb.LogSettingsRequest())
        assert logs.settings["log_info"].bool_param is True

        metrics = MetricsFrontend("127.0.0.1", 0, 60.0, LatencyConfig(), cpu=False, gpu=False)
        await metrics.start(dp)
        try:
            body, _ = await metrics.scrape_workers()
            assert b'nv_inference_request_success{model="llm",version="1"} 0' in body
        finally:
            await metrics.stop(1.0)

    serve(tmp_path, scenario)


def test_a_model_the_tenant_may_not_see_is_answered_by_the_shared_check(tmp_path: Path) -> None:
    """HTTP and gRPC answer a hidden model through ``inferd.auth.admit``, which asks the interface
    (the control mode first for load and unload, then as for an unknown model)."""
    keys = tmp_path / "auth.json"
    keys.write_text(json.dumps({"tenants": {"ops": {"keys": [digest("k")], "models": ["other*"],
                                                    "apis": ["health", "metadata", "model-repository"]}}}))  # fmt: skip
    bearer = [(b"authorization", b"Bearer k")]

    async def scenario(server: Server) -> None:
        app = HttpApp(facade(server.dataplane))
        for action in ("load", "unload"):
            status, body = await http_post(app, f"/v2/repository/models/llm/{action}", b"{}", headers=bearer)
            assert status == 503 and b"explicit model load / unload is not allowed" in body, action
        assert await http_post(app, "/v2/models/llm/ready", b"", "GET", bearer) == (
            400, b'{"error":"Model version not ready"}'
        )  # fmt: skip
        status, body = await http_post(app, "/v2/models/llm/traffic", b"", "GET", bearer)
        assert status == 404 and json.loads(body) == {"error": "Request for unknown model: 'llm' is not found"}

        svc = InferenceService(facade(server.dataplane))
        rpcs = {rpc.name: rpc for rpc in RPCS}
        metadata = {"authorization": "Bearer k"}
        ready = await svc.admitted(rpcs["ModelReady"], svc.ModelReady, pb.ModelReadyRequest(name="llm"), metadata)
        assert ready == pb.ModelReadyResponse(ready=False)
        load = pb.RepositoryModelLoadRequest(model_name="llm")
        with pytest.raises(InferdError, match="explicit model load / unload is not allowed"):
            await svc.admitted(rpcs["RepositoryModelLoad"], svc.RepositoryModelLoad, load, metadata)

    serve(tmp_path, scenario, auth_config=keys)


def test_the_openai_frontend_lists_models_and_adapters_through_the_interface(tmp_path: Path) -> None:
    pytest.importorskip("inferd_frontend_openai")
    from inferd_frontend_openai.app import OpenAIApp
    from inferd_frontend_openai.catalog import Catalog

    async def scenario(server: Server) -> None:
        dp = facade(server.dataplane)
        (served,) = dp.served_models()
        assert isinstance(served, ServedModel) and served is dp.served_model("llm") is dp.routed_model("llm")
        assert (served.name, served.version, served.lora_adapters) == ("llm", 1, ("sql", "poem"))
        app = OpenAIApp(dp, Catalog(dp))
        status, listed = await get(app, "/v1/models")
        assert status == 200 and [m["id"] for m in listed["data"]] == ["llm", "poem", "sql"]
        status, entry = await get(app, "/v1/models/llm")
        assert status == 200 and entry["max_model_len"] == 4096  # the model's chat engine, declared
        status, adapter = await get(app, "/v1/models/sql")
        assert status == 200 and adapter["id"] == "sql" and "max_model_len" not in adapter
        assert (await get(app, "/v1/models/nosuch"))[0] == 404

    serve(tmp_path, scenario)
