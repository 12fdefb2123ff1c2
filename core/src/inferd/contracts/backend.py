"""The backend contract: Backend -> Model -> Instance.

A backend plugin registers a :class:`Backend` factory through the ``inferd_register_backends``
hook. At load time the lifecycle asks the backend to complete the configuration (optional), then
``load_model`` once per model version, then ``Model.create_instance`` once per instance of each
``instance_group`` entry. An instance is one of two types, and its type says how core runs it:

- :class:`SyncInstance`: ``def execute`` computes; it runs on the instance's own thread, never
  concurrently with itself, so an instance may keep per-instance state (a session, a CUDA stream).
- :class:`AsyncInstance`: ``async def execute`` hands the batch to work that runs elsewhere (an
  asyncio engine, another process) and awaits it on the server's event loop, with no thread.
"""

from __future__ import annotations

import abc
import asyncio
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeAlias

from inferd.contracts.errors import InferdError
from inferd.contracts.types import InferRequest, InferResponse

if TYPE_CHECKING:
    from inferd.config import ModelConfig
    from inferd.contracts.dataplane import ChatEngine


#: One request's result: its response, or its error.
Outcome: TypeAlias = InferResponse | InferdError

#: ``request.context[RESCHEDULE] = True``, set by ``execute``: run this request again in a
#: later batch instead of answering it (Triton's ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``). Only
#: the sequence batcher of an ``iterative_sequence`` model honours it; the request's result from
#: that execution is dropped (a decoupled request keeps its response sender).
RESCHEDULE = "inferd.reschedule"


@dataclass(slots=True)
class Started:
    """What a pipelined :class:`AsyncInstance` (``pipeline_depth`` > 1) may return instead of its
    list: the ``results``, and ``start_ns`` (``time.monotonic_ns``), when the instance could start
    on the batch: the end of the batch it ran before, when that came after the hand-over. Core
    counts the wait behind that batch as queue time, not ``compute_infer``. A ``None`` result: a
    decoupled request, answered through its sender."""

    results: list[Outcome | None]
    start_ns: int


class ModelClient(Protocol):
    """Runs a request on another model of the server, from a backend's instance thread."""

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        """Block until ``request`` is answered; raises :class:`~inferd.contracts.errors.InferdError`."""
        ...

    def stream_from_thread(self, request: InferRequest) -> Iterator[InferResponse | InferdError]:
        """Start ``request`` now; iterating blocks for each response, in order, up to the final
        one (one for an ordinary model, 0..N for a decoupled one). An unknown model raises
        :class:`~inferd.contracts.errors.InferdError`; later errors are items."""
        ...


def process_cores(workers: int = 1) -> int:
    """The cores this process may use (its CPU affinity) divided among ``workers`` (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, workers))


@dataclass(frozen=True, slots=True)
class ModelLoadContext:
    """Everything a backend needs to load one version of a model."""

    name: str
    version: int
    config: ModelConfig
    model_dir: Path
    version_dir: Path
    repository: Path
    #: The server's other models, for models that call them (Triton's BLS), from an instance thread.
    models: ModelClient | None = None
    #: The server's event loop: where an :class:`AsyncInstance`'s ``execute`` runs, and where such
    #: a backend runs its asyncio engine. ``None`` outside a server (tests).
    loop: asyncio.AbstractEventLoop | None = None
    #: The CPU cores this serving process may compute on: its CPU affinity, divided among the
    #: ``--workers`` that share the machine (at least 1). A backend sizing its thread pools by
    #: default sizes them from this, so N workers do not each take every core.
    cores: int = field(default_factory=process_cores)
    #: How many instances of this version this serving process creates: under ``--workers``, its
    #: share of the config's (they are dealt out among the workers). ``None`` outside a server:
    #: every instance the config lists.
    instances: int | None = None

    @property
    def model_path(self) -> Path:
        """``<model>/<version>/<default_model_filename>`` (the file or directory to load)."""
        return self.version_dir / self.config.default_model_filename


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One instance to create: Triton names it ``<group name>_<index within the group>``."""

    name: str
    kind: str  # "KIND_CPU", "KIND_GPU" or "KIND_MODEL"
    device_id: int
    index: int
    group_name: str


class RunOnThread(Exception):
    """Raised by a :class:`SyncInstance`'s ``execute`` that core runs on the event loop
    (``may_run_inline``) when it finds it must wait for the server (a call to another model): core
    then runs the same batch again on the instance's own thread. An instance that raises it should
    also turn ``may_run_inline`` off, so the next batches go to its thread first."""


class SyncInstance(abc.ABC):
    """An instance whose ``execute`` computes: core runs it on the instance's own thread.

    ``execute`` is never called concurrently on one instance and never on the event loop unless
    :attr:`may_run_inline` allows it, so it may block, keep per-thread state, and call other models
    (``ModelLoadContext.models``).
    """

    #: ``True``: ``execute`` is safe on the event loop (it never waits on the server, such as a
    #: call to another model, and keeps no per-thread state) and often quick. Core then runs an
    #: execution on the loop when this instance's recent executions predict it to take at most
    #: ``inferd.engine.runner.INLINE_LIMIT_NS`` for its batch, and on the instance's thread otherwise:
    #: for a small model, the two thread hand-offs cost more than its compute. An instance may set
    #: it per object, and turn it off while it runs (its executions then stay on its thread).
    may_run_inline: bool = False

    #: With ``may_run_inline``: a batch whose inputs hold more bytes than this runs on the instance's
    #: thread however quick its execution is predicted to be (0: no limit).
    inline_max_bytes: int = 0

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferRequest]) -> Sequence[Outcome]:
        """Run a batch of requests; return one response or error per request, in order.

        A decoupled model instead sends its responses through ``request.response_sender`` and
        returns an empty list.
        """

    def close(self) -> None:
        """Release the instance's resources. Called once, on its thread, after its last ``execute``."""


class AsyncInstance(abc.ABC):
    """An instance whose ``execute`` only hands work off and awaits it: core runs it on the
    server's event loop (``ModelLoadContext.loop``), with no thread.

    ``execute`` must never block the loop. Until it returns the instance is busy and the execution
    timed; a caller that goes away meanwhile (a client disconnecting) leaves at once, and the
    execution runs on to its end (it is not cancelled). A decoupled model's
    ``response_sender`` called on the loop delivers at once.
    """

    #: How many batches core may hand this instance at once (the direct scheduler; the dynamic and
    #: sequence batchers keep one, to form larger batches). More than 1 only for an instance that
    #: runs the batches one at a time, in order, itself (a stub process starts the next batch as
    #: soon as the last one ended, without waiting for the server's event loop to hand it over); it
    #: returns :class:`Started` for a batch that waited behind another, so that the wait counts as
    #: queue time.
    pipeline_depth: ClassVar[int] = 1

    @abc.abstractmethod
    async def execute(self, requests: Sequence[InferRequest]) -> Sequence[Outcome | None] | Started:
        """Run a batch of requests; return one response or error per request, in order (or,
        pipelined, :class:`Started` holding them). A decoupled model sends its responses through
        ``request.response_sender`` and returns an empty list (or ``None`` for each request)."""

    def close(self) -> None:
        """Release the instance's resources. Called once, on a worker thread, after its last ``execute``."""


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Memory a loaded model holds that the serving process's resident memory does not show
    (:meth:`Model.memory_usage`; new in API 1.2). The memory budget of on-demand loading counts it."""

    #: Resident bytes held outside the serving process (a process-isolated model's stubs' RSS).
    host_bytes: int = 0
    #: Bytes held on each device, by device name (``{"cuda:0": n}``: the names
    #: ``--model-device-memory-budget`` takes).
    device_bytes: Mapping[str, int] = field(default_factory=dict)


#: What ``Model.create_instance`` returns: one of the two execution types.
Instance: TypeAlias = SyncInstance | AsyncInstance


class Model(abc.ABC):
    """A loaded model version: shared weights from which instances are made."""

    #: The LoRA adapters this version serves by name (a request names one with the ``lora_name``
    #: parameter); frontends with a catalog (the OpenAI API) list each under its own name.
    lora_adapters: tuple[str, ...] = ()
    #: The backend's own tokenizer and chat renderer, offered to text frontends (the vLLM
    #: backend's); None: frontends use the tokenizer files in the model's directory.
    chat_engine: ChatEngine | None = None

    @abc.abstractmethod
    def create_instance(self, spec: InstanceSpec) -> Instance:
        """Create one instance (called from a worker thread, possibly several times)."""

    def unload(self) -> None:
        """Release the model after every instance is closed."""

    def not_serving(self) -> str | None:
        """Why this loaded version cannot serve right now (say, an instance restarting after its
        process crashed), or None. Model readiness and the repository index (state UNAVAILABLE,
        this reason) read it; it must be cheap and never block."""
        return None

    def memory_usage(self) -> MemoryUsage | None:
        """The memory this version holds that the serving process's RSS does not show (another
        process's, a device's), or None: nothing (the default). New in API 1.2.

        Read on the event loop after the version loads and again before the memory budget picks
        models to evict (``--model-memory-budget``, ``--model-device-memory-budget``): it must be
        cheap and never block (read a counter or ``/proc``; never wait for a device or a process)."""
        return None

    async def check_ready(self) -> str | None:
        """Why the model's own readiness check fails now, or None: Triton's
        ``TRITONBACKEND_ModelInstanceReady`` (a Python model's ``is_ready``).

        Awaited on the server's event loop each time readiness is asked: model ready, and server
        ready under ``--strict-readiness``; requests and the repository index do not consult it.
        It must never block the loop: run the model's code elsewhere and bound its wait.
        """
        return None


class Backend(abc.ABC):
    """A framework that can load models; one object per server, made by the registered factory."""

    #: The name config.pbtxt's ``backend:`` field uses ("onnxruntime", "python", "fil"...).
    name: str = ""
    #: File or directory loaded from the version directory when the config names none.
    default_model_filename: str = "model"
    #: Instance count for a KIND_CPU group that sets no count (Triton: 2 for ONNX Runtime, else 1).
    default_cpu_instance_count: int = 1

    def autocomplete_config(self, config: ModelConfig, model_dir: Path, version_dir: Path | None) -> None:
        """Fill what the config leaves out (inputs, outputs, max_batch_size...) from the model files.

        Called before validation unless auto-complete is disabled. Mutates ``config`` in place.
        The default completes nothing.
        """

    @abc.abstractmethod
    def load_model(self, context: ModelLoadContext) -> Model:
        """Load one version of a model. Raise an error with a clear message when it fails."""
