"""inferd's public API for plugin authors: every name a backend, scheduler, cache, frontend or
tracing plugin needs, in one import (``from inferd.api import Backend, hookimpl, InvalidArgument``).

A plugin imports only from these modules (``tests/core/test_import_structure.py`` checks every
plugin under ``plugins/`` and the cookiecutter template):

- ``inferd.api`` (this module): the contracts (``inferd.contracts.*`` underneath, which may move);
- ``inferd.config``, ``inferd.config.model_config_pb2``: the model configuration (Triton's schema);
- ``inferd.serving``, ``inferd.serving.tls``: the HTTP servers and TLS settings a frontend uses;
- ``inferd.auth``: access rules, tenants and metering a frontend applies;
- ``inferd.shared_memory``: the shared-memory extensions' regions;
- ``inferd.testing``: servers, clients and the backend contract test for a plugin's tests.

Everything else (``inferd.engine``, ``inferd.lifecycle``, ``inferd.host``, the built-in plugins) is
the host's own and changes without notice. Names imported through the flat layout of earlier
releases (``inferd.contracts.backend``, ``inferd.contracts.errors``...) still work for one release and warn once
(:mod:`inferd.moved`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Where each public name lives: ``{module: names}`` (imported on first use: a plugin that takes
#: ``InvalidArgument`` imports ``inferd.contracts.errors`` only).
_WHERE = {
    "inferd.contracts": ("gc_settings",),
    "inferd.contracts.backend": (
        "RESCHEDULE",
        "ArrayInstance",
        "Backend",
        "Instance",
        "InstanceSpec",
        "Model",
        "ModelClient",
        "ModelLoadContext",
        "Started",
        "concat_inputs",
        "process_cores",
    ),
    "inferd.contracts.cache": ("ResponseCache", "frozen_copy"),
    "inferd.contracts.dataplane": (
        "BatchStatistics",
        "ChatEngine",
        "DataPlane",
        "Duration",
        "LogSettings",
        "ModelMetadata",
        "ModelStatistics",
        "OtherWorkers",
        "PlaneSettings",
        "RepositoryEntry",
        "ServedModel",
        "ServerMetadata",
        "ServingVersion",
        "TenantUsage",
        "TraceSettings",
        "Traffic",
        "TrafficVersion",
        "UsageCounts",
        "UsageReport",
        "VersionCounters",
        "VersionTraffic",
    ),
    "inferd.contracts.errors": (
        "Cancelled",
        "ConfigError",
        "ErrorKind",
        "InferdError",
        "InternalError",
        "InvalidArgument",
        "NotFound",
        "Unavailable",
        "Unsupported",
        "error_response",
    ),
    "inferd.contracts.flags": (
        "backend_config_setting",
        "parse_bool",
        "setting_flag",
        "setting_integer",
    ),
    "inferd.contracts.frontend": ("Frontend",),
    "inferd.contracts.hints": (
        "closest",
        "did_you_mean",
    ),
    "inferd.contracts.hookspecs": (
        "BackendRegister",
        "CacheRegister",
        "FrontendRegister",
        "SchedulerRegister",
        "ServerSettings",
        "ServerView",
        "hookimpl",
    ),
    "inferd.contracts.json_depth": (
        "MAX_JSON_DEPTH",
        "TOO_DEEP",
        "depth_problem",
    ),
    "inferd.contracts.log_context": (
        "REQUEST_ID",
        "REQUEST_MODEL",
    ),
    "inferd.contracts.metric_sources": (
        "SOURCES",
        "MetricsSource",
    ),
    "inferd.contracts.model_info": (
        "Infer",
        "Resolve",
        "Stream",
        "ModelInfo",
        "TensorInfo",
    ),
    "inferd.contracts.runner": ("InstanceRunner",),
    "inferd.contracts.scheduler": (
        "InstancePool",
        "ModelCaller",
        "Rejected",
        "Scheduler",
        "SchedulerContext",
    ),
    "inferd.contracts.trace": (
        "RequestTrace",
        "Tracer",
    ),
    "inferd.contracts.types": (
        "PICKED",
        "NUMPY_TO_WIRE",
        "WIRE_DATATYPES",
        "WIRE_TO_NUMPY",
        "InferRequest",
        "InferResponse",
        "InferTensor",
        "RequestedOutput",
        "array_from_bytes",
        "array_to_bytes",
        "config_to_wire",
        "deserialize_bytes_tensor",
        "numpy_dtype",
        "serialize_bytes_tensor",
        "wire_datatype",
    ),
    "inferd.contracts.validation": (
        "RequestValidator",
        "TensorSpec",
    ),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = [
    "ArrayInstance",
    "Backend",
    "BackendRegister",
    "BatchStatistics",
    "CacheRegister",
    "Cancelled",
    "ChatEngine",
    "ConfigError",
    "DataPlane",
    "Duration",
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
    "MAX_JSON_DEPTH",
    "MetricsSource",
    "Model",
    "ModelCaller",
    "ModelClient",
    "ModelInfo",
    "ModelLoadContext",
    "ModelMetadata",
    "ModelStatistics",
    "NotFound",
    "NUMPY_TO_WIRE",
    "OtherWorkers",
    "PICKED",
    "PlaneSettings",
    "REQUEST_ID",
    "REQUEST_MODEL",
    "RESCHEDULE",
    "Rejected",
    "RepositoryEntry",
    "RequestTrace",
    "RequestValidator",
    "RequestedOutput",
    "Resolve",
    "ResponseCache",
    "SOURCES",
    "Scheduler",
    "SchedulerContext",
    "SchedulerRegister",
    "ServedModel",
    "ServerMetadata",
    "ServerSettings",
    "ServerView",
    "ServingVersion",
    "Started",
    "Stream",
    "TOO_DEEP",
    "TenantUsage",
    "TensorInfo",
    "TensorSpec",
    "TraceSettings",
    "Tracer",
    "Traffic",
    "TrafficVersion",
    "Unavailable",
    "Unsupported",
    "UsageCounts",
    "UsageReport",
    "VersionCounters",
    "VersionTraffic",
    "WIRE_DATATYPES",
    "WIRE_TO_NUMPY",
    "array_from_bytes",
    "array_to_bytes",
    "backend_config_setting",
    "closest",
    "concat_inputs",
    "config_to_wire",
    "depth_problem",
    "deserialize_bytes_tensor",
    "did_you_mean",
    "error_response",
    "frozen_copy",
    "gc_settings",
    "hookimpl",
    "numpy_dtype",
    "parse_bool",
    "process_cores",
    "serialize_bytes_tensor",
    "setting_flag",
    "setting_integer",
    "wire_datatype",
]

if TYPE_CHECKING:
    from inferd.contracts import gc_settings
    from inferd.contracts.backend import (
        RESCHEDULE,
        ArrayInstance,
        Backend,
        Instance,
        InstanceSpec,
        Model,
        ModelClient,
        ModelLoadContext,
        Started,
        concat_inputs,
        process_cores,
    )
    from inferd.contracts.cache import ResponseCache, frozen_copy
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
    from inferd.contracts.errors import (
        Cancelled,
        ConfigError,
        ErrorKind,
        InferdError,
        InternalError,
        InvalidArgument,
        NotFound,
        Unavailable,
        Unsupported,
        error_response,
    )
    from inferd.contracts.flags import (
        backend_config_setting,
        parse_bool,
        setting_flag,
        setting_integer,
    )
    from inferd.contracts.frontend import (
        Frontend,
    )
    from inferd.contracts.hints import (
        closest,
        did_you_mean,
    )
    from inferd.contracts.hookspecs import (
        BackendRegister,
        CacheRegister,
        FrontendRegister,
        SchedulerRegister,
        ServerSettings,
        ServerView,
        hookimpl,
    )
    from inferd.contracts.json_depth import (
        MAX_JSON_DEPTH,
        TOO_DEEP,
        depth_problem,
    )
    from inferd.contracts.log_context import (
        REQUEST_ID,
        REQUEST_MODEL,
    )
    from inferd.contracts.metric_sources import (
        SOURCES,
        MetricsSource,
    )
    from inferd.contracts.model_info import (
        Infer,
        ModelInfo,
        Resolve,
        Stream,
        TensorInfo,
    )
    from inferd.contracts.runner import (
        InstanceRunner,
    )
    from inferd.contracts.scheduler import (
        InstancePool,
        ModelCaller,
        Rejected,
        Scheduler,
        SchedulerContext,
    )
    from inferd.contracts.trace import (
        RequestTrace,
        Tracer,
    )
    from inferd.contracts.types import (
        NUMPY_TO_WIRE,
        PICKED,
        WIRE_DATATYPES,
        WIRE_TO_NUMPY,
        InferRequest,
        InferResponse,
        InferTensor,
        RequestedOutput,
        array_from_bytes,
        array_to_bytes,
        config_to_wire,
        deserialize_bytes_tensor,
        numpy_dtype,
        serialize_bytes_tensor,
        wire_datatype,
    )
    from inferd.contracts.validation import (
        RequestValidator,
        TensorSpec,
    )


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then cached in this module)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'inferd.api' has no attribute {name!r}")
    found = importlib.import_module(module)
    # a name of the module, or a submodule of the package (``gc_settings`` of ``inferd.contracts``)
    value = getattr(found, name) if hasattr(found, name) else importlib.import_module(f"{module}.{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
