"""What a frontend receives in ``start(dataplane)``: the :class:`DataPlane` interface and its typed results.

A frontend decodes its wire format into an :class:`~inferd.contracts.types.InferRequest`, resolves
the model once (:attr:`DataPlane.resolve`), runs the request (:attr:`DataPlane.infer` /
:attr:`DataPlane.stream`) and encodes what comes back; every other answer (health, metadata,
repository control, statistics, settings, traffic, usage) is a frozen dataclass below, which each
frontend turns into its own wire format. The host implements the interface twice: the local data
plane (``inferd.dataplane``) and, for ``inferd serve --workers N``, a decorator that spans the
other workers (``inferd.workers.cluster``); a frontend cannot tell them apart.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from inferd.auth import AccessControl
    from inferd.config import ModelConfig
    from inferd.contracts.model_info import Infer, ModelInfo, Resolve, Stream, TensorInfo
    from inferd.contracts.stats import LatencyObserver
    from inferd.contracts.trace import Tracer
    from inferd.contracts.types import InferRequest
    from inferd.shared_memory import SharedMemory

R = TypeVar("R")


# -- results ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """Triton's server metadata: name (``--id``), version and the extensions served."""

    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """Triton's model metadata: the model's ready versions and its signature."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


@dataclass(frozen=True, slots=True)
class RepositoryEntry:
    """One row of Triton's repository index ("" where Triton leaves the field out); ``traffic``:
    a split version's traffic state (``inferd.engine.traffic``)."""

    name: str
    version: str = ""
    state: str = ""
    reason: str = ""
    traffic: str = ""


@dataclass(frozen=True, slots=True)
class Duration:
    """A count and the nanoseconds they took (Triton's ``StatisticDuration``)."""

    count: int
    ns: int


@dataclass(frozen=True, slots=True)
class BatchStatistics:
    """The executions of one batch size."""

    batch_size: int
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration


@dataclass(frozen=True, slots=True)
class VersionTraffic:
    """A split version's place in its model's traffic (``inferd.engine.traffic``)."""

    state: str
    weight: int
    rollbacks: int
    promotions: int


@dataclass(frozen=True, slots=True)
class ModelStatistics:
    """Triton's ``model_stats`` entry of one version (summed over the workers of ``--workers N``).

    ``inference_stats``: Triton's fields by name (success, fail, queue, compute_input,
    compute_infer, compute_output, cache_hit, cache_miss); ``response_stats``: by response index,
    the same for each decoupled response; ``memory_usage``: what the backend reported, as it did."""

    name: str
    version: str
    last_inference: int
    inference_count: int
    execution_count: int
    inference_stats: Mapping[str, Duration]
    response_stats: Mapping[str, Mapping[str, Duration]]
    batch_stats: tuple[BatchStatistics, ...]
    memory_usage: tuple[Mapping[str, Any], ...] = ()
    traffic: VersionTraffic | None = None


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Triton's trace settings (the trace extension), global or of one model."""

    trace_level: tuple[str, ...]
    trace_rate: str
    trace_count: str
    log_frequency: str
    trace_file: str
    trace_mode: str


@dataclass(frozen=True, slots=True)
class LogSettings:
    """Triton's log settings (the logging extension)."""

    log_file: str
    log_info: bool
    log_warning: bool
    log_error: bool
    log_verbose_level: int
    log_format: str


@dataclass(frozen=True, slots=True)
class TrafficVersion:
    """One version of a traffic split: its weight and share, state, the canary policy's counts and
    its current window's figures (requests, failures, latency: the policy's own names)."""

    weight: int
    share: float
    state: str
    rollbacks: int
    promotions: int
    window: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Traffic:
    """A model's traffic split (``GET /v2/models/<m>/traffic``; empty ``weights``: none). ``policy``
    and ``decisions`` are the canary policy's settings and its log, as ``docs/traffic.md`` shows them."""

    model: str
    weights: Mapping[str, int]
    versions: Mapping[str, TrafficVersion]
    source: str | None = None
    policy: Mapping[str, Any] | None = None
    last_check: float | None = None
    decisions: tuple[Mapping[str, Any], ...] | None = None
    #: The shadow version, its share, state and comparisons (``None``: no shadow).
    shadow: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """Requests and tokens of one tenant (on one model, or in total)."""

    success_requests: int = 0
    failure_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """One tenant's usage, by model and in total."""

    models: Mapping[str, UsageCounts]
    totals: UsageCounts


@dataclass(frozen=True, slots=True)
class UsageReport:
    """``GET /v2/usage``: every tenant's requests and tokens (the whole server's)."""

    tenants: Mapping[str, TenantUsage]


@dataclass(frozen=True, slots=True)
class PlaneSettings:
    """What a frontend binds and serves with: the same for built-in and plugin frontends.

    ``shares_ports``: other serving processes (``--workers N``) serve the same ports: bind with
    ``SO_REUSEPORT``. ``namespacing``: ``--model-namespacing``. ``access``: the access rules
    (restricted APIs, API keys, tenants; ``inferd.auth``), None when every request is open.
    ``status_plots``: ``--status-plots-dir``, the folder whose plots the status page links to
    (None: none; API 1.1)."""

    shares_ports: bool = False
    namespacing: bool = False
    access: AccessControl | None = field(default=None, compare=False)
    status_plots: str | None = None


# -- the catalog of served models -------------------------------------------------------------


class ChatEngine(Protocol):
    """A backend's own tokenizer and chat renderer, which it offers text frontends (the vLLM
    backend's); declared by a :class:`~inferd.contracts.backend.Model` as ``chat_engine``."""

    tokenizer: Any
    max_model_len: int

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str: ...
    def tool_request(self, body: dict[str, Any], tool_parser: str | None) -> Any: ...
    def tool_calls(self, prepared: Any, text: str) -> tuple[str | None, list[dict[str, Any]]]: ...


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class ServedModel:
    """A serving version as a frontend with a catalog of its own (the OpenAI API) sees it: its
    :class:`ModelInfo`, its directory (tokenizer files, ``model.json``), the LoRA adapters its
    backend serves by name, and the backend's chat engine if it offers one. One object per loaded
    version (compared by identity): a frontend may key what it caches per version by it, weakly."""

    info: ModelInfo
    directory: Path | None
    lora_adapters: tuple[str, ...] = ()
    chat_engine: ChatEngine | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def version(self) -> int:
        return self.info.version


# -- metrics -----------------------------------------------------------------------------------------


class VersionCounters(Protocol):
    """The counters of one serving version, as the metrics frontend reads them."""

    observer: LatencyObserver | None

    def snapshot(self) -> dict[str, Any]: ...


class ServingVersion(Protocol):
    """A serving version as the metrics frontend reads it."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def namespace(self) -> str: ...
    @property
    def config(self) -> ModelConfig: ...
    @property
    def decoupled(self) -> bool: ...
    @property
    def stats(self) -> VersionCounters: ...


@dataclass(frozen=True, slots=True)
class OtherWorkers:
    """The other serving processes' counters (``--workers N``), for one metrics scrape:
    ``snapshots`` by ``(name, version, namespace)``, ``sources`` the plugins' metric families;
    ``live`` what the workers that answered just now hold (``{"pending": [[name, version,
    namespace, count]...], "gauges": [family...]}`` each: a dead or silent worker holds none)."""

    snapshots: Mapping[tuple[str, str, str], Mapping[str, Any]]
    sources: Sequence[list[list[Any]]]
    live: Sequence[Mapping[str, Any]] = ()


class AccessLog(Protocol):
    """``--access-log``: one line per inference request a frontend answered (docs/traffic.md,
    "Access log"). A frontend calls :meth:`begin` once it decoded a request and :meth:`entry`
    when it answered it (or failed to); both return at once (a thread writes the lines)."""

    def begin(self, request: InferRequest) -> None:
        """Have the request's queue and compute times kept (the recorder marks them)."""

    def entry(
        self,
        protocol: str,
        request: InferRequest | None,
        model: str,
        version: str,
        status: str,
        bytes_in: int,
        bytes_out: int,
    ) -> None:
        """One line: ``request`` (None when it could not be decoded) answered with ``status``."""


# -- the interface -----------------------------------------------------------------------------------


class DataPlane(abc.ABC):
    """Health, metadata, inference, repository control, statistics, settings, traffic and usage.

    ``resolve``, ``infer`` and ``stream`` are attributes (the host binds its router's methods:
    a request costs no call in between); everything else is a method returning typed results.
    Errors are :class:`~inferd.contracts.errors.InferdError` with a kind each frontend maps.
    """

    #: The version that serves a request for ``name``/``version`` now; pass it to ``infer``/``stream``.
    resolve: Resolve
    #: Run one request to completion (decoupled models go through ``stream``).
    infer: Infer
    #: Every response of one request, in order; a failure is an item.
    stream: Stream
    #: ``--access-log``: what frontends write each request's line to (None: off).
    access_log: AccessLog | None = None

    @property
    @abc.abstractmethod
    def settings(self) -> PlaneSettings:
        """How frontends bind and whom they admit."""

    @property
    @abc.abstractmethod
    def shared_memory(self) -> SharedMemory:
        """The shared-memory regions clients registered (the shared-memory extensions)."""

    @property
    @abc.abstractmethod
    def tracer(self) -> Tracer:
        """Request tracing (start-up hooks configure exporters on it)."""

    # health and metadata
    @abc.abstractmethod
    def is_live(self) -> bool: ...

    @abc.abstractmethod
    async def is_ready(self) -> bool:
        """Ready to serve (every serving process of the server)."""

    @abc.abstractmethod
    async def model_ready(self, name: str, version: str = "") -> bool: ...

    @abc.abstractmethod
    def server_metadata(self) -> ServerMetadata: ...

    @abc.abstractmethod
    def model_metadata(self, name: str, version: str = "") -> ModelMetadata: ...

    @abc.abstractmethod
    def model_config(self, name: str, version: str = "") -> ModelConfig: ...

    @abc.abstractmethod
    def model_names(self) -> list[str]:
        """Every model name the server knows (for "did you mean" hints)."""

    # the catalog
    @abc.abstractmethod
    def served_models(self) -> Sequence[ServedModel]:
        """Every serving version, by name then version."""

    @abc.abstractmethod
    def served_model(self, name: str, version: str = "") -> ServedModel:
        """The version serving ``name``/``version`` (the highest ready one when ``version`` is empty)."""

    @abc.abstractmethod
    def routed_model(self, name: str) -> ServedModel:
        """The version a request for ``name`` that names no version runs on (its traffic split picks)."""

    async def load_on_demand(self, name: str) -> None:
        """With ``--model-load-on-demand``: load ``name`` when it is in the repository and serves
        no version, or wait for its load under way (UNAVAILABLE past the server's timeout); nothing
        otherwise. :attr:`infer` and :attr:`stream` do it themselves: a frontend with a catalog of
        its own (:meth:`served_model`, :meth:`routed_model`) calls it first, once it checked that the
        caller may see ``name``. The default does nothing (a plane with no on-demand loading)."""

    # repository control
    @abc.abstractmethod
    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]: ...

    @abc.abstractmethod
    def check_control(self) -> None:
        """Raise :class:`~inferd.contracts.errors.Unavailable` (Triton's sentence) when the model
        control mode refuses load and unload requests."""

    @abc.abstractmethod
    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        """Load or reload ``name``; ``parameters['config']`` (JSON) overrides its config.pbtxt,
        ``file:<path>`` parameters (bytes, or base64 text) are its files."""

    @abc.abstractmethod
    async def unload_model(self, name: str, unload_dependents: bool = False) -> None: ...

    # statistics and metrics
    @abc.abstractmethod
    async def model_statistics(self, name: str = "", version: str = "") -> list[ModelStatistics]:
        """Every ready version's statistics, or those of one model (or version)."""

    @abc.abstractmethod
    def serving_versions(self) -> Sequence[ServingVersion]:
        """This process's serving versions and their counters, by name then version."""

    @abc.abstractmethod
    async def with_other_workers(self, read: Callable[[OtherWorkers | None], R]) -> R:
        """``read(others)`` with the other serving processes' counters (None: there are none),
        called with no await in between so that nothing changes while it reads."""

    # settings
    @abc.abstractmethod
    def trace_settings(self, model: str = "") -> TraceSettings: ...

    @abc.abstractmethod
    async def update_trace_settings(self, settings: dict[str, Any], model: str = "") -> TraceSettings:
        """Change some trace settings (a null value resets one); returns them all."""

    @abc.abstractmethod
    def log_settings(self) -> LogSettings: ...

    @abc.abstractmethod
    async def update_log_settings(self, settings: dict[str, Any]) -> LogSettings:
        """Change some log settings (applied at once); returns them all."""

    # traffic and usage
    @abc.abstractmethod
    def traffic(self, name: str) -> Traffic: ...

    @abc.abstractmethod
    async def set_traffic(self, name: str, weights: Any, shadow: str | None = None) -> Traffic:
        """Set ``name``'s weights live (``{"1": 99, "2": 1}``; ``None``: keep them) and, when given,
        its shadow (``"2:100"``; ``""``: none)."""

    @abc.abstractmethod
    async def tenant_usage(self) -> UsageReport: ...
