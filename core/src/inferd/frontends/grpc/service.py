"""The ``inference.GRPCInferenceService``, ``grpc.health.v1.Health`` and ``inferd.Traffic`` handlers over
a data plane. :data:`RPCS` is every RPC the transports serve, with its API group (what
``--grpc-restricted-protocol`` and the tenants' rights admit it as); :data:`STATUS` turns an error's
kind into its gRPC status."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc
from google.protobuf import json_format

from inferd.auth import CURRENT, ApiGroup, Grant, Hidden, ModelAction, admit, unknown_model, visible_entries
from inferd.contracts.errors import ErrorKind, InferdError, InvalidArgument
from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc import health_pb2, traffic_pb2
from inferd.frontends.grpc.codec import (
    WireRequest,
    WireResponse,
    encode_response,
    final_empty_response,
    param_value,
    stream_error,
)
from inferd.frontends.grpc.parameter_checks import ENABLE_EMPTY_FINAL
from inferd.frontends.grpc.plans import RequestPlans
from inferd.frontends.header_forward import GRPC_TRANSPORT_HEADERS, HeaderForward
from inferd.frontends.reply_headers import reply_headers
from inferd.frontends.repository_name import check_repository_name
from inferd.shared_memory import bind_outputs
from inferd.views import results_json

if TYPE_CHECKING:
    from inferd.contracts.dataplane import DataPlane
    from inferd.contracts.types import InferRequest

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"
#: inferd's own service (Triton has no traffic RPC): weighted versions, docs/traffic.md.
TRAFFIC_SERVICE = "inferd.Traffic"

#: Error kind -> gRPC status, as Triton maps TRITONSERVER_Error_Code; the access kinds
#: (``inferd.auth``) as Triton answers a restricted protocol (UNAVAILABLE) and as gRPC names the others.
STATUS: dict[ErrorKind, grpc.StatusCode] = {
    ErrorKind.UNKNOWN: grpc.StatusCode.UNKNOWN,
    ErrorKind.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorKind.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorKind.RESTRICTED: grpc.StatusCode.UNAVAILABLE,
    ErrorKind.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorKind.FORBIDDEN: grpc.StatusCode.PERMISSION_DENIED,
    ErrorKind.LIMITED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class Rpc(NamedTuple):
    """One RPC: its service, its name (an :class:`InferenceService` method), the API group the
    access rules admit it as, and its request and response classes (None for ModelInfer and
    ModelStreamInfer: their (de)serializers are the codec's, which keep tensor bytes raw)."""

    service: str
    name: str
    group: ApiGroup
    request: Any = None
    response: Any = None

    @property
    def path(self) -> str:
        """The call's path: ``/<service>/<method>``."""
        return f"/{self.service}/{self.name}"


_HEALTH, _METADATA, _INFERENCE = ApiGroup.HEALTH, ApiGroup.METADATA, ApiGroup.INFERENCE
_REPOSITORY, _SHM = ApiGroup.MODEL_REPOSITORY, ApiGroup.SHARED_MEMORY
#: ModelInfer and ModelStreamInfer (the codec's (de)serializers).
INFER_RPC = Rpc(SERVICE, "ModelInfer", _INFERENCE)
STREAM_RPC = Rpc(SERVICE, "ModelStreamInfer", _INFERENCE)
#: The trailing metadata a ModelInfer call adds to its OK status (``server-timing``,
#: ``x-tokens-used``: :mod:`inferd.frontends.reply_headers`); set only when there is some, read
#: by the transports after the call (each call runs in its own task, so in its own context).
CALL_TRAILERS: ContextVar[list[tuple[str, str]] | None] = ContextVar("inferd.grpc_trailers", default=None)
#: The unary RPCs with protobuf messages, of every service the transports serve.
UNARY: tuple[Rpc, ...] = (
    Rpc(SERVICE, "ServerLive", _HEALTH, pb.ServerLiveRequest, pb.ServerLiveResponse),
    Rpc(SERVICE, "ServerReady", _HEALTH, pb.ServerReadyRequest, pb.ServerReadyResponse),
    Rpc(SERVICE, "ModelReady", _HEALTH, pb.ModelReadyRequest, pb.ModelReadyResponse),
    Rpc(SERVICE, "ServerMetadata", _METADATA, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    Rpc(SERVICE, "ModelMetadata", _METADATA, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    Rpc(SERVICE, "ModelConfig", ApiGroup.MODEL_CONFIG, pb.ModelConfigRequest, pb.ModelConfigResponse),
    Rpc(SERVICE, "ModelStatistics", ApiGroup.STATISTICS, pb.ModelStatisticsRequest, pb.ModelStatisticsResponse),
    Rpc(SERVICE, "RepositoryIndex", _REPOSITORY, pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
    Rpc(SERVICE, "RepositoryModelLoad", _REPOSITORY, pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse),
    Rpc(
        SERVICE, "RepositoryModelUnload", _REPOSITORY, pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse
    ),
    Rpc(SERVICE, "TraceSetting", ApiGroup.TRACE, pb.TraceSettingRequest, pb.TraceSettingResponse),
    Rpc(SERVICE, "LogSettings", ApiGroup.LOGGING, pb.LogSettingsRequest, pb.LogSettingsResponse),
    *(
        Rpc(
            SERVICE,
            f"{kind}SharedMemory{op}",
            _SHM,
            getattr(pb, f"{kind}SharedMemory{op}Request"),
            getattr(pb, f"{kind}SharedMemory{op}Response"),
        )
        for kind in ("System", "Cuda")
        for op in ("Status", "Register", "Unregister")
    ),
    Rpc(HEALTH_SERVICE, "Check", _HEALTH, health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
    # weighted versions (inferd's own): a model-repository change
    Rpc(
        TRAFFIC_SERVICE, "ModelTraffic", _REPOSITORY, traffic_pb2.ModelTrafficRequest, traffic_pb2.ModelTrafficResponse
    ),
)
#: Every RPC the transports serve.
RPCS: tuple[Rpc, ...] = (*UNARY, INFER_RPC, STREAM_RPC)

_DONE = object()
_CLOSING = object()
#: Requests one ModelStreamInfer call runs at once (``--grpc-stream-max-inflight``'s default).
STREAM_MAX_INFLIGHT = 64
#: The field of each RPC's request that names a model (ModelInfer's is in ``WireRequest.message``).
MODEL_FIELD = {
    "ModelReady": "name",
    "ModelMetadata": "name",
    "ModelConfig": "name",
    "ModelStatistics": "name",
    "RepositoryModelLoad": "model_name",
    "RepositoryModelUnload": "model_name",
    "TraceSetting": "model_name",
    "ModelTraffic": "name",
}


def model_of(rpc: str, request: Any) -> str:
    """The model an RPC's request names ("" for none)."""
    if rpc == "ModelInfer":
        return request.message.model_name if request.message is not None else ""
    field = MODEL_FIELD.get(rpc)
    return "" if field is None else getattr(request, field)


def metadata_dict(metadata: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """Text metadata by (lowercase) key; binary ``-bin`` values are left out."""
    return {key: value for key, value in metadata if isinstance(value, str)}


def status_of(exc: InferdError) -> grpc.StatusCode:
    return STATUS.get(exc.kind, grpc.StatusCode.UNKNOWN)


def wants_grpc_error(metadata: Iterable[tuple[str, Any]]) -> bool:
    """Triton's ``triton_grpc_error: true`` header: stream errors end the stream with a status."""
    for key, value in metadata:
        if key == "triton_grpc_error":
            return str(value).lower() == "true"
    return False


def _check_seen(model: str) -> None:
    """A stream request for a model the stream's tenant may not see fails as an unknown model's."""
    grant = CURRENT.get()
    if grant is None or not grant.sees(model):
        raise unknown_model(model)


#: The RPCs whose answer for a model the caller may not see is not NOT_FOUND (:func:`inferd.auth.admit`).
_ACTIONS = {
    "ModelReady": ModelAction.READY,
    "RepositoryModelLoad": ModelAction.LOAD,
    "RepositoryModelUnload": ModelAction.UNLOAD,
}


class InferenceService:
    """One method per RPC; each takes the request message and returns the response message."""

    def __init__(
        self, dataplane: DataPlane, stream_max_inflight: int = STREAM_MAX_INFLIGHT, forward_pattern: str | None = None
    ) -> None:
        """``dataplane`` answers every RPC; nothing here knows the transport. A stream holds at
        most ``stream_max_inflight`` requests in flight (and as many responses not yet sent).
        ``forward_pattern``: ``--grpc-header-forward-pattern`` (None: metadata is not forwarded)."""
        self.dp = dataplane
        self.stream_max_inflight = stream_max_inflight
        #: The server's shared-memory regions (the shared-memory extensions).
        self.shm = dataplane.shared_memory
        self.regions = dataplane.shared_memory.regions
        #: Repeated ModelInfer headers, decoded once.
        self.plans = RequestPlans()
        #: Response queues of the open streams, told to wind down when the server stops.
        self._streams: set[asyncio.Queue[Any]] = set()
        #: The gRPC access rules (``inferd.auth``); None: every call is open.
        access = dataplane.settings.access
        self.policy = access.grpc if access is not None else None
        #: Metadata forwarded as request parameters; None: the transports pass no metadata to infer.
        self.forward: HeaderForward | None = None
        if forward_pattern is not None:
            secrets = self.policy.secret_headers() if self.policy is not None else frozenset()
            self.forward = HeaderForward(forward_pattern, GRPC_TRANSPORT_HEADERS | secrets)

    async def admitted(
        self, rpc: Rpc, method: Callable[[Any], Awaitable[Any]], request: Any, metadata: Mapping[str, str]
    ) -> Any:
        """``method(request)`` once the policy admits it as ``rpc``'s group (raises ``AccessDenied``
        or an unknown model's error); a model the caller may not see answers as an unknown one."""
        assert self.policy is not None
        model = model_of(rpc.name, request)
        grant = admit(self.policy, rpc.group, _ACTIONS.get(rpc.name, ModelAction.OTHER), model, metadata, self.dp)
        if grant is Hidden.NOT_READY:
            return pb.ModelReadyResponse(ready=False)
        if grant is Hidden.UNLOADED:
            return pb.RepositoryModelUnloadResponse()  # unloading an unknown model succeeds
        assert isinstance(grant, Grant)
        with grant.serving():
            return await method(request)

    def open_stream(self, metadata: Mapping[str, str]) -> Grant | None:
        """Admit a ModelStreamInfer call (its key and API group; None without a policy). Its
        requests are checked model by model, and each holds a slot of the tenant while it runs."""
        if self.policy is None:
            return None
        grant = self.policy.admit(STREAM_RPC.group, "", metadata, slot=False)
        CURRENT.set(grant)
        return grant

    def close(self) -> None:
        """Open streams stop taking requests and end once their in-flight requests are answered."""
        for queue in self._streams:
            queue.put_nowait(_CLOSING)

    # -- health and metadata ----------------------------------------------------------------------

    async def ServerLive(self, request: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=self.dp.is_live())

    async def ServerReady(self, request: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self.dp.is_ready())

    async def ModelReady(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self.dp.model_ready(request.name, request.version))

    async def ServerMetadata(self, request: pb.ServerMetadataRequest) -> pb.ServerMetadataResponse:
        meta = self.dp.server_metadata()
        return pb.ServerMetadataResponse(name=meta.name, version=meta.version, extensions=meta.extensions)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        meta = self.dp.model_metadata(request.name, request.version)
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=meta.versions,
            platform=meta.platform,
            inputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.inputs],
            outputs=[tensor(name=t.name, datatype=t.datatype, shape=t.shape) for t in meta.outputs],
        )

    async def ModelConfig(self, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(config=self.dp.model_config(request.name, request.version))

    async def ModelStatistics(self, request: pb.ModelStatisticsRequest) -> pb.ModelStatisticsResponse:
        stats = [
            results_json.statistics(s)
            for s in visible_entries(await self.dp.model_statistics(request.name, request.version))
        ]
        return json_format.ParseDict({"model_stats": stats}, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    # -- inference --------------------------------------------------------------------------------

    async def ModelInfer(self, request: WireRequest, metadata: Mapping[str, str] | None = None) -> WireResponse:
        """One inference; ``metadata`` (the call's, lowercase keys) is given only to forward it."""
        if self.dp.access_log is not None:  # --access-log
            return await self._logged_infer(request, metadata)
        infer_request = self.plans.decode(request, self.regions)
        if metadata is not None and self.forward is not None:
            self.forward.add_text(infer_request.parameters, metadata.items())
        sinks = bind_outputs(infer_request, self.regions) if infer_request.outputs else None
        info = self.dp.resolve(infer_request.model_name, infer_request.model_version)
        response = await self.dp.infer(infer_request, info)
        if response.parameters and (trailers := reply_headers(response.parameters)):
            CALL_TRAILERS.set(trailers)
        if sinks is None:
            return encode_response(response)
        sinks.write(response)
        return encode_response(response, in_regions=sinks)

    async def _logged_infer(self, request: WireRequest, metadata: Mapping[str, str] | None) -> WireResponse:
        """:meth:`ModelInfer` with its line in the access log: the same steps, apart so that a
        server without the log pays one check. Bytes: the messages' (tensor field tags aside)."""
        access = self.dp.access_log
        assert access is not None
        infer_request: InferRequest | None = None
        model = version = ""
        bytes_in = len(request.header) + sum(len(raw) for raw in request.raw)
        try:
            infer_request = self.plans.decode(request, self.regions)
            model, version = infer_request.model_name, infer_request.model_version
            access.begin(infer_request)
            if metadata is not None and self.forward is not None:
                self.forward.add_text(infer_request.parameters, metadata.items())
            sinks = bind_outputs(infer_request, self.regions) if infer_request.outputs else None
            info = self.dp.resolve(infer_request.model_name, infer_request.model_version)
            response = await self.dp.infer(infer_request, info)
            if response.parameters and (trailers := reply_headers(response.parameters)):
                CALL_TRAILERS.set(trailers)
            if sinks is None:
                wire = encode_response(response)
            else:
                sinks.write(response)
                wire = encode_response(response, in_regions=sinks)
        except InferdError as exc:
            access.entry("grpc", infer_request, model, version, status_of(exc).name, bytes_in, 0)
            raise
        except Exception:
            access.entry("grpc", infer_request, model, version, "INTERNAL", bytes_in, 0)
            raise
        bytes_out = wire.header.ByteSize() + sum(len(raw) for raw in wire.raw)
        access.entry("grpc", infer_request, model, response.model_version, "OK", bytes_in, bytes_out)
        return wire

    async def stream_one(
        self,
        wire: WireRequest,
        put: Callable[[Any], Awaitable[None]],
        grant: Grant | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Every response of one stream request, in order, through ``put``; errors included.
        With ``grant`` (the stream's), the request holds a slot of its tenant while it runs;
        ``metadata`` (the stream's) is given only to forward it."""
        infer_request: InferRequest | None = None
        held: Grant | None = None
        try:
            infer_request = self.plans.decode(wire, self.regions)
            if metadata is not None and self.forward is not None:
                self.forward.add_text(infer_request.parameters, metadata.items())
            if grant is not None and self.policy is not None:
                _check_seen(infer_request.model_name)
                held = self.policy.hold(grant)
            sinks = bind_outputs(infer_request, self.regions) if infer_request.outputs else None
            info = self.dp.resolve(infer_request.model_name, infer_request.model_version)
            decoupled = info.decoupled
            version = infer_request.model_version
            ended = False
            async for item in self.dp.stream(infer_request, info):
                if isinstance(item, InferdError):
                    await put((item, infer_request))
                    continue
                version = item.model_version
                ended = item.final or not decoupled
                if sinks is not None:
                    sinks.write(item)
                await put(encode_response(item, final=ended, in_regions=sinks or ()))
            if decoupled and not ended and infer_request.context.get(ENABLE_EMPTY_FINAL) is True:
                await put(final_empty_response(infer_request, version))
        except InferdError as exc:  # an access refusal too
            await put((exc, infer_request))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            rid = infer_request.id if infer_request is not None else ""
            log.exception("stream request %r failed", rid)
            await put((InferdError(f"internal error: {type(exc).__name__}: {exc}", ErrorKind.INTERNAL), infer_request))
        finally:
            if held is not None:
                held.release()

    async def ModelStreamInfer(
        self,
        requests: AsyncIterator[WireRequest],
        grpc_error: bool,
        grant: Grant | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> AsyncIterator[WireResponse | pb.ModelStreamInferResponse]:
        """Requests of one stream run concurrently; the responses of each come in order.

        At most :attr:`stream_max_inflight` requests run at once: the next message is read only
        once one of them is answered. Responses wait for the transport in a queue of as many; a
        client that reads none holds back its requests, then its reading. ``grant`` (the stream's,
        from :meth:`open_stream`) gives each request a slot of its tenant while it runs; the
        stream's ``metadata`` is forwarded into each of its requests (``--grpc-header-forward-pattern``).

        An error is a response carrying it (the stream goes on), or with ``grpc_error`` (Triton's
        ``triton_grpc_error`` header) the :class:`InferdError` (an access refusal too) raised: the
        transport ends the stream with its status.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()  # bounded by ``room``; the sentinels need none
        room = asyncio.Semaphore(self.stream_max_inflight)
        slots = asyncio.Semaphore(self.stream_max_inflight)
        tasks: set[asyncio.Task[None]] = set()
        state = {"reading": True}

        async def put(item: Any) -> None:
            await room.acquire()
            queue.put_nowait(item)

        def task_done(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            slots.release()
            if not tasks and not state["reading"]:
                queue.put_nowait(_DONE)

        async def read() -> None:
            messages = aiter(requests)
            try:
                while True:
                    await slots.acquire()  # a free slot first: past the cap, the stream is not read
                    try:
                        wire = await anext(messages)
                    except StopAsyncIteration:
                        slots.release()
                        return
                    task = asyncio.ensure_future(self.stream_one(wire, put, grant, metadata))
                    tasks.add(task)
                    task.add_done_callback(task_done)
            finally:
                state["reading"] = False
                if not tasks:
                    queue.put_nowait(_DONE)

        reader = asyncio.ensure_future(read())
        self._streams.add(queue)
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                if item is _CLOSING:
                    reader.cancel()
                    continue
                room.release()
                if isinstance(item, tuple):
                    exc, infer_request = item
                    if grpc_error:
                        raise exc
                    yield stream_error(exc.message, infer_request)
                else:
                    yield item
        finally:
            self._streams.discard(queue)
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    # -- repository -------------------------------------------------------------------------------

    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest) -> pb.RepositoryIndexResponse:
        check_repository_name(request.repository_name)
        index = pb.RepositoryIndexResponse.ModelIndex
        return pb.RepositoryIndexResponse(
            models=[
                index(name=e.name, version=e.version, state=e.state, reason=e.reason)
                for e in visible_entries(self.dp.repository_index(request.ready))
            ]
        )

    async def ModelTraffic(self, request: traffic_pb2.ModelTrafficRequest) -> traffic_pb2.ModelTrafficResponse:
        """inferd.Traffic/ModelTraffic: read a model's split, or set it when weights are given."""
        if request.weights or request.HasField("shadow"):
            shadow = request.shadow if request.HasField("shadow") else None
            shown = await self.dp.set_traffic(request.name, dict(request.weights) or None, shadow)
        else:
            shown = self.dp.traffic(request.name)
        states = {v: d.state for v, d in shown.versions.items()}
        return traffic_pb2.ModelTrafficResponse(
            weights=shown.weights, states=states, json=json.dumps(results_json.traffic(shown))
        )

    async def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest) -> pb.RepositoryModelLoadResponse:
        check_repository_name(request.repository_name)
        parameters: dict[str, Any] = {}
        for key, value in request.parameters.items():
            which = value.WhichOneof("parameter_choice")
            if key == "config" and which != "string_param":
                raise InvalidArgument(f"load request for '{request.model_name}': 'config' must be a string_param")
            if key.startswith("file:") and which != "bytes_param":
                raise InvalidArgument(f"load request for '{request.model_name}': '{key}' must be a bytes_param")
            parameters[key] = param_value(value)
        await self.dp.load_model(request.model_name, parameters)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest) -> pb.RepositoryModelUnloadResponse:
        check_repository_name(request.repository_name)
        dependents = request.parameters.get("unload_dependents")
        await self.dp.unload_model(request.model_name, bool(dependents is not None and dependents.bool_param))
        return pb.RepositoryModelUnloadResponse()

    # -- trace and logging extensions ---------------------------------------------------------------

    async def TraceSetting(self, request: pb.TraceSettingRequest) -> pb.TraceSettingResponse:
        """An empty value list resets a setting (tritonclient sends one for ``None``)."""
        settings: dict[str, Any] = {}
        for key, value in request.settings.items():
            values = list(value.value)
            # Every setting but trace_level takes one value; more is refused (parse_setting names it).
            settings[key] = None if not values else values if key == "trace_level" or len(values) > 1 else values[0]
        if settings:
            current = await self.dp.update_trace_settings(settings, request.model_name)
        else:
            current = self.dp.trace_settings(request.model_name)
        value_type = pb.TraceSettingResponse.SettingValue
        return pb.TraceSettingResponse(
            settings={
                k: value_type(value=v if isinstance(v, list) else [v])
                for k, v in results_json.trace_settings(current).items()
            }
        )

    async def LogSettings(self, request: pb.LogSettingsRequest) -> pb.LogSettingsResponse:
        settings = {}
        for key, value in request.settings.items():
            which = value.WhichOneof("parameter_choice")
            settings[key] = None if which is None else getattr(value, which)
        current = await self.dp.update_log_settings(settings) if settings else self.dp.log_settings()
        value_type = pb.LogSettingsResponse.SettingValue
        out = {}
        for k, v in results_json.log_settings(current).items():
            if isinstance(v, bool):
                out[k] = value_type(bool_param=v)
            elif isinstance(v, int):
                out[k] = value_type(uint32_param=v)
            else:
                out[k] = value_type(string_param=str(v))
        return pb.LogSettingsResponse(settings=out)

    # -- shared-memory extensions -------------------------------------------------------------------

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest
    ) -> pb.SystemSharedMemoryStatusResponse:
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        regions = {r["name"]: status(**r) for r in self.shm.status("system", request.name)}
        return pb.SystemSharedMemoryStatusResponse(regions=regions)

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest
    ) -> pb.SystemSharedMemoryRegisterResponse:
        await self.shm.register_system(request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self.shm.unregister("system", request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest
    ) -> pb.CudaSharedMemoryStatusResponse:
        status = pb.CudaSharedMemoryStatusResponse.RegionStatus
        regions = {r["name"]: status(**r) for r in self.shm.status("cuda", request.name)}
        return pb.CudaSharedMemoryStatusResponse(regions=regions)

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self.shm.register_cuda(request.name, request.raw_handle, request.device_id, request.byte_size)
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self.shm.unregister("cuda", request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    # -- grpc.health.v1 ---------------------------------------------------------------------------

    async def Check(self, request: health_pb2.HealthCheckRequest) -> health_pb2.HealthCheckResponse:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if await self.dp.is_ready()
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)
