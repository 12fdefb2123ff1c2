"""Isolated Python models: each instance in a stub process of its own, supervised by the server.

A model whose config sets ``parameters { key: "EXECUTION_MODE" value: { string_value: "process" } }``
(or an ``EXECUTION_ENV_PATH``; :mod:`~inferd_backend_python.process_settings`) is served by
:class:`ProcessModel`. Each instance starts a stub (:mod:`inferd_backend_python.stub`) with the
server's interpreter, or the environment's (:mod:`~inferd_backend_python.launcher`), and talks to
it over :mod:`~inferd_backend_python.ipc` (:mod:`~inferd_backend_python.stub_connection`). A stub
that dies (signal, exit, killed for its memory limit or a timed-out ``execute``) fails the requests
it held with the cause, and is restarted with a growing delay
(:mod:`~inferd_backend_python.restart_policy`); the model reports itself not serving meanwhile
(``Model.not_serving``). After ``RESTART_LIMIT`` crashes within ``RESTART_WINDOW_SECS`` the instance
stays down and the model UNAVAILABLE, with the reason. Other models are not affected.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from inferd.api import (
    AsyncInstance,
    InferdError,
    InferRequest,
    InferResponse,
    InstanceSpec,
    InternalError,
    MemoryUsage,
    Model,
    ModelLoadContext,
    Unavailable,
)
from inferd_backend_python.instance import instance_args
from inferd_backend_python.isolation import Isolation
from inferd_backend_python.launcher import Launcher
from inferd_backend_python.pb_metrics import FAMILIES
from inferd_backend_python.pb_request import ModelBinding
from inferd_backend_python.process_settings import Settings
from inferd_backend_python.readiness import Probe, first_problem
from inferd_backend_python.restart_policy import RestartPolicy
from inferd_backend_python.stub_batches import Results
from inferd_backend_python.stub_connection import Stub
from inferd_backend_python.stub_context import StubContext
from inferd_backend_python.stub_logs import LogBudget

_log = logging.getLogger("inferd.contracts.backend.python")


class ProcessModel(Model):
    """A Python model whose instances each run in a stub process (``EXECUTION_MODE: process``)."""

    def __init__(self, context: ModelLoadContext, path: Path, settings: Settings, isolation: Isolation) -> None:
        from inferd.api import config_to_json

        self.name = context.name
        self.version = str(context.version)
        self.path = path
        self.settings = settings
        self.decoupled = bool(context.config.model_transaction_policy.decoupled)
        self.iterative = bool(context.config.sequence_batching.iterative_sequence)
        self.binding = ModelBinding(self.name, self.version, context.model_dir, self.decoupled, context.models)
        self.model_dir = context.model_dir
        if context.loop is None:
            raise InternalError(f"model '{self.name}': an isolated Python model needs a running server's event loop")
        self.loop = context.loop
        self.instances: list[ProcessInstance] = []
        self._args = {
            "model_config": json.dumps(config_to_json(context.config)),
            "model_repository": str(context.model_dir),
            "model_version": self.version,
            "model_name": self.name,
        }
        self.isolation = isolation
        # what its stubs may log, all instances together (:mod:`inferd_backend_python.stub_logs`)
        budget = LogBudget(self.name, self.version, functools.partial(isolation.stats.logged, self.name, self.version))
        # last: unload releases the environment it prepared
        launcher = Launcher.for_settings(settings, f"model '{self.name}'", isolation.spawner)
        #: What its stubs share (their connections see the model through it).
        self.stubs = StubContext(
            model_name=self.name,
            settings=settings,
            launcher=launcher,
            loop=self.loop,
            decoupled=self.decoupled,
            models=context.models,
            binding=self.binding,
            log_budget=budget,
            isolation=isolation,
        )
        self._released = False
        FAMILIES.model_loaded(self.binding)
        isolation.hold()

    def init_settings(self, spec: InstanceSpec) -> dict[str, Any]:
        """What the stub of instance ``spec`` needs to run ``initialize`` (the INIT message)."""
        return {
            "name": self.name,
            "version": self.version,
            "path": str(self.path),
            "model_dir": str(self.model_dir),
            "decoupled": self.decoupled,
            "iterative": self.iterative,
            "args": instance_args(self._args, spec),
            "cpus": list(self.settings.cpus),
            "log_level": logging.getLogger("inferd.python").getEffectiveLevel(),
        }

    def create_instance(self, spec: InstanceSpec) -> AsyncInstance:
        instance = ProcessInstance(self, spec)
        instance.stub = Stub.start(instance, self.stubs, self.init_settings(spec))
        self.instances.append(instance)
        self.isolation.stats.started(instance)
        return instance

    def not_serving(self) -> str | None:
        for instance in self.instances:
            if instance.problem is not None:
                return f"instance '{instance.name}' {instance.problem}"
        return None

    def memory_usage(self) -> MemoryUsage:
        """Its stubs' resident memory (``/proc/<pid>/statm``, read now: cheap): the memory budget
        of on-demand loading counts it, which the server's own RSS does not show."""
        return MemoryUsage(host_bytes=sum(stub_rss(i.stub.pid) for i in self.instances if i.stub is not None))

    async def check_ready(self) -> str | None:
        """The instances' ``is_ready`` in their stubs (when the model defines one)."""
        return await first_problem([i.probe for i in self.instances if i.stub is not None and i.stub.has_is_ready])

    def unload(self) -> None:
        FAMILIES.model_unloaded(self.binding)
        self.isolation.stats.forget(self.instances)
        if not self._released:  # after the instances' stubs stopped (the builder closes them first)
            self._released = True
            self.stubs.launcher.release()
            self.isolation.release()


_PAGE = os.sysconf("SC_PAGE_SIZE")


def stub_rss(pid: int) -> int:
    """The resident memory of process ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


class ProcessInstance(AsyncInstance):
    """One instance of an isolated model: its current stub, restarted when it dies.

    Asynchronous: ``execute`` runs on the server's loop, hands the batch to the stub and awaits
    its results (no instance thread)."""

    #: Batches wait in the stub's socket while one executes: the stub starts the next as soon as it
    #: sent the last one's results, without waiting for the server's loop to hand it over, and
    #: neither side sleeps between batches while requests keep coming. Only the direct scheduler
    #: hands out more than one batch at a time (a dynamic batcher waits for each). Measured with
    #: benchmarks/python_isolation.py at concurrency 8 (2 cores): depth 2 cost ~400 CPU µs per
    #: request, depth 8 ~300 (Triton's stub ~320), the stub no longer waking for each request.
    pipeline_depth: ClassVar[int] = 8

    def __init__(self, model: ProcessModel, spec: InstanceSpec) -> None:
        self.model = model
        self.spec = spec
        self.name = spec.name
        self.label = f"model '{model.name}' instance '{spec.name}'"
        #: (model, version, instance): its labels on ``/metrics``.
        self.labels = (model.name, model.version, spec.name)
        self.stub: Stub | None = None
        #: Why the instance cannot serve now (restarting, or stopped after a crash loop); None: it can.
        self.problem: str | None = None
        self.closing = False
        self._restarts = RestartPolicy(model.settings.restart_limit, model.settings.restart_window_s)
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.probe = Probe(self.label, self._ask_ready)

    @property
    def rss(self) -> int:
        """Its running stub's resident memory (0: none runs, or not read yet)."""
        stub = self.stub
        return stub.rss if stub is not None else 0

    def _ask_ready(self) -> asyncio.Future[bool]:
        stub = self.stub
        if stub is None:
            future: asyncio.Future[bool] = self.model.loop.create_future()
            future.set_exception(InternalError(f"Stub process '{self.name}' is not healthy."))
            return future
        return stub.calls.ask_ready()

    async def execute(self, requests: Sequence[InferRequest]) -> Results:
        stub = self.stub
        future = stub.batches.submit(requests) if stub is not None else None
        return self._refuse(requests) if future is None else await future

    def _refuse(self, requests: Sequence[InferRequest]) -> list[InferResponse | InferdError]:
        problem = self.problem or "is restarting: its stub process ended"
        error = Unavailable(f"Stub process '{self.name}' is not healthy.; {self.label} {problem}")
        if self.model.decoupled:
            for request in requests:
                if request.response_sender is not None:
                    request.response_sender(error, True)
            return []
        return [error] * len(requests)

    def stub_died(self, stub: Stub, cause: str, kind: str) -> None:
        """Called by ``stub``'s reader once it is gone: count the crash, restart or give up."""
        with self._lock:
            if stub is not self.stub:
                return
            self.stub = None
            if self.closing:
                return
        self._crashed(f"its stub process (pid {stub.pid}) {cause}", kind)

    def _crashed(self, cause: str, kind: str) -> None:
        self.model.isolation.stats.crashed(self, kind)
        with self._lock:
            if self.closing:
                return
            self.problem, delay = self._restarts.crashed(cause)
            if delay is None:
                _log.error("%s %s", self.label, self.problem)
                return
            self._timer = threading.Timer(delay, self._restart)
            self._timer.daemon = True
            self._timer.start()
        _log.error("%s: %s; restarting it in %.2f s", self.label, cause, delay)

    def _restart(self) -> None:
        try:
            stub: Stub | None = Stub.start(self, self.model.stubs, self.model.init_settings(self.spec))
        except InferdError as exc:
            self._crashed(f"its restart failed: {exc.message}", "restart")
            return
        with self._lock:
            if not self.closing:
                self.stub, self.problem = stub, None
                stub = None
        if stub is not None:  # unloaded meanwhile
            stub.finalize()
            return
        self.model.isolation.stats.restarted(self)
        _log.info("%s: restarted (stub pid %d)", self.label, self.stub.pid if self.stub else 0)

    def close(self) -> None:
        with self._lock:
            self.closing = True
            if self._timer is not None:
                self._timer.cancel()
            stub, self.stub = self.stub, None
        if stub is not None:
            stub.finalize()
