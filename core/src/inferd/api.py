"""inferd's plugin API, version 1.2: the one module a plugin's source imports.

``from inferd.api import Backend, hookimpl, InvalidArgument`` gives a backend, scheduler, cache,
frontend or tracing plugin every name it needs. Everything else under ``inferd`` is the host's own
and changes without notice (``tests/core/test_import_structure.py`` holds every plugin under
``plugins/``, the cookiecutter template and ``docs/examples/`` to this module; a plugin's tests may
also use the test kit, :mod:`inferd.testing`).

**Versions.** :data:`API_VERSION` is ``(major, minor)``: a minor adds names, a major changes or
removes one. A plugin declares the API it was written for beside its hooks, as a literal
(``INFERD_API = (1, 0)`` in the entry point's module; never ``API_VERSION`` itself, which is always
the host's). The host refuses a plugin declaring another major, naming both versions, and a
plugin's distribution requires ``inferd>=1,<2``.

**The listing.** The ``if TYPE_CHECKING:`` block below is the one list of public names and where
each lives: type checkers read it as ordinary imports (so no name is ``Any`` to them), and at run
time each name is imported from that statement on first use (``InvalidArgument`` imports
``inferd.contracts.errors`` only: the Python backend's model processes and plugin discovery stay
light). ``__all__`` repeats the names; a test holds the two equal.

Besides the contracts (ABCs, Protocols, dataclasses, errors, the hook specifications' registers),
a few helpers are public on purpose because plugins need the host's exact behaviour:

- tensors on the wire: :func:`numpy_dtype`, :func:`wire_datatype`, :data:`NUMPY_TO_WIRE`,
  :data:`WIRE_TO_NUMPY`, :func:`config_to_wire`, :func:`serialize_bytes_tensor`,
  :func:`deserialize_bytes_tensor`, :func:`array_to_bytes`, :func:`array_from_bytes`;
- settings: :func:`setting_flag`, :func:`setting_integer` (``--backend-config`` and model
  parameters), :func:`parse_bool` (a Triton-spelled boolean flag), :func:`process_cores`;
- frontends: :func:`closest` (a bounded "did you mean" over names a client may see),
  :data:`TOO_DEEP` and :func:`depth_problem` (the JSON nesting limit every frontend applies),
  :data:`PICKED` and :data:`METERED` (``request.context`` keys: the version was picked through the
  model's traffic split; the frontend meters the tenant's usage itself), :func:`http_tls_config`;
- :func:`frozen_copy` (a cache's stored response), :func:`error_response` (an error a model
  answers with), :func:`settle_gc` (the serving process's garbage-collector settings, for a
  plugin's own model processes);
- the status page (API 1.1): :data:`STATUS_PAGE` (its HTML), :func:`status_view` (the JSON it
  shows, ``GET /v2/status``), :func:`status_plot` and :data:`STATUS_PLOT_HEADERS` (a plot it links
  to, ``GET /v2/status/plots/{name}``), for a frontend that serves the page where the HTTP port does not;
- also new in API 1.1: :class:`EmbeddedServer` (``inferd serve``'s server inside another server's
  process, e.g. a Ray Serve replica), ``DataPlane.load_on_demand`` (``--model-load-on-demand``),
  ``DataPlane.access_log`` (``--access-log``) and the ``shadow`` field of ``Traffic`` / argument of
  ``DataPlane.set_traffic``;
- new in API 1.2: :class:`MemoryUsage` and ``Model.memory_usage`` (memory a model holds that the
  server's resident memory does not show: a stub process's, a device's; the memory budget counts it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

#: The plugin API this host provides: ``(major, minor)``.
API_VERSION = (1, 2)

if TYPE_CHECKING:
    from inferd.auth import CURRENT, METERED, AccessControl, AccessDenied, AccessPolicy, ApiGroup
    from inferd.config import ModelConfig, ModelParameters, config_from_json, config_to_json, platform_for
    from inferd.config.model_config_pb2 import DataType
    from inferd.contracts.backend import (
        RESCHEDULE,
        AsyncInstance,
        Backend,
        Instance,
        InstanceSpec,
        MemoryUsage,
        Model,
        ModelClient,
        ModelLoadContext,
        RunOnThread,
        Started,
        SyncInstance,
        process_cores,
    )
    from inferd.contracts.cache import ResponseCache
    from inferd.contracts.dataplane import (
        BatchStatistics,
        ChatEngine,
        DataPlane,
        Duration,
        LogSettings,
        ModelMetadata,
        ModelStatistics,
        OtherWorkers,
        PlaneSettings,
        RepositoryEntry,
        ServedModel,
        ServerMetadata,
        ServingVersion,
        TenantUsage,
        TraceSettings,
        Traffic,
        TrafficVersion,
        UsageCounts,
        UsageReport,
        VersionCounters,
        VersionTraffic,
    )
    from inferd.contracts.embedded import EmbeddedServer
    from inferd.contracts.errors import (
        Cancelled,
        ConfigError,
        ErrorKind,
        InferdError,
        InternalError,
        InvalidArgument,
        NotFound,
        StartupError,
        Unavailable,
        Unsupported,
        error_response,
    )
    from inferd.contracts.flags import parse_bool, setting_flag, setting_integer
    from inferd.contracts.frontend import Frontend
    from inferd.contracts.hints import closest
    from inferd.contracts.hookspecs import (
        BackendRegister,
        CacheRegister,
        FrontendRegister,
        SchedulerRegister,
        ServerSettings,
        ServerView,
        hookimpl,
    )
    from inferd.contracts.log_context import REQUEST_ID, REQUEST_MODEL
    from inferd.contracts.metric_sources import MetricsSource
    from inferd.contracts.model_info import Infer, ModelInfo, Resolve, Stream, TensorInfo
    from inferd.contracts.scheduler import InstanceRunner, ModelCaller, Rejected, Scheduler, SchedulerContext
    from inferd.contracts.types import PICKED, InferRequest, InferResponse, InferTensor, RequestedOutput
    from inferd.contracts.validation import RequestValidator, TensorSpec
    from inferd.datatypes import (
        NUMPY_TO_WIRE,
        WIRE_TO_NUMPY,
        array_from_bytes,
        array_to_bytes,
        config_to_wire,
        deserialize_bytes_tensor,
        numpy_dtype,
        serialize_bytes_tensor,
        wire_datatype,
    )
    from inferd.engine.array_instance import ArrayInstance
    from inferd.engine.gc_settings import settle as settle_gc
    from inferd.engine.metric_sources import SOURCES
    from inferd.engine.pool import InstancePool
    from inferd.engine.response_cache import frozen_copy
    from inferd.serving import HTTP_MAX_INPUT_SIZE, TOO_DEEP, TOO_LARGE, AsgiServer, BodyLimit, depth_problem
    from inferd.serving.tls import TlsConfig
    from inferd.serving.tls import http_config as http_tls_config
    from inferd.views.status import PAGE as STATUS_PAGE
    from inferd.views.status import PLOT_HEADERS as STATUS_PLOT_HEADERS
    from inferd.views.status import status_plot, status_view

__all__ = [
    "API_VERSION",
    "CURRENT",
    "HTTP_MAX_INPUT_SIZE",
    "METERED",
    "NUMPY_TO_WIRE",
    "PICKED",
    "REQUEST_ID",
    "REQUEST_MODEL",
    "RESCHEDULE",
    "SOURCES",
    "STATUS_PAGE",
    "STATUS_PLOT_HEADERS",
    "TOO_DEEP",
    "TOO_LARGE",
    "WIRE_TO_NUMPY",
    "AccessControl",
    "AccessDenied",
    "AccessPolicy",
    "ApiGroup",
    "ArrayInstance",
    "AsgiServer",
    "AsyncInstance",
    "Backend",
    "BackendRegister",
    "BatchStatistics",
    "BodyLimit",
    "CacheRegister",
    "Cancelled",
    "ChatEngine",
    "ConfigError",
    "DataPlane",
    "DataType",
    "Duration",
    "EmbeddedServer",
    "ErrorKind",
    "Frontend",
    "FrontendRegister",
    "Infer",
    "InferRequest",
    "InferResponse",
    "InferTensor",
    "InferdError",
    "Instance",
    "InstancePool",
    "InstanceRunner",
    "InstanceSpec",
    "InternalError",
    "InvalidArgument",
    "LogSettings",
    "MemoryUsage",
    "MetricsSource",
    "Model",
    "ModelCaller",
    "ModelClient",
    "ModelConfig",
    "ModelInfo",
    "ModelLoadContext",
    "ModelMetadata",
    "ModelParameters",
    "ModelStatistics",
    "NotFound",
    "OtherWorkers",
    "PlaneSettings",
    "Rejected",
    "RepositoryEntry",
    "RequestValidator",
    "RequestedOutput",
    "Resolve",
    "ResponseCache",
    "Scheduler",
    "SchedulerContext",
    "SchedulerRegister",
    "ServedModel",
    "ServerMetadata",
    "ServerSettings",
    "ServerView",
    "ServingVersion",
    "RunOnThread",
    "Started",
    "StartupError",
    "Stream",
    "SyncInstance",
    "TenantUsage",
    "TensorInfo",
    "TensorSpec",
    "TlsConfig",
    "TraceSettings",
    "Traffic",
    "TrafficVersion",
    "Unavailable",
    "Unsupported",
    "UsageCounts",
    "UsageReport",
    "VersionCounters",
    "VersionTraffic",
    "array_from_bytes",
    "array_to_bytes",
    "closest",
    "config_from_json",
    "config_to_json",
    "config_to_wire",
    "depth_problem",
    "deserialize_bytes_tensor",
    "error_response",
    "frozen_copy",
    "hookimpl",
    "http_tls_config",
    "numpy_dtype",
    "parse_bool",
    "platform_for",
    "process_cores",
    "serialize_bytes_tensor",
    "setting_flag",
    "setting_integer",
    "settle_gc",
    "status_plot",
    "status_view",
    "wire_datatype",
]

if not TYPE_CHECKING:  # hidden from type checkers: to them a name missing above is an error, not Any
    import importlib

    _WHERE: dict[str, tuple[str, str]] | None = None

    def _where() -> dict[str, tuple[str, str]]:
        """``{public name: (module, attribute)}``, read once from the ``if TYPE_CHECKING:`` block."""
        global _WHERE
        if _WHERE is None:
            import ast

            with open(__file__, encoding="utf-8") as source:
                tree = ast.parse(source.read())
            (block,) = (n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
            _WHERE = {a.asname or a.name: (s.module, a.name) for s in block.body for a in s.names}
        return _WHERE

    def __getattr__(name: str):
        """A public name, imported from its module on first use (then kept in this module)."""
        where = _where().get(name)
        if where is None:
            raise AttributeError(f"module 'inferd.api' has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0]), where[1])
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return __all__
