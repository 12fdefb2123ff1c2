"""Request tracing: Triton's trace extension (settings) and its JSON trace files.

A :class:`Tracer` holds the global trace settings and per-model overrides, samples requests
(every ``trace_rate``-th request of a settings scope, until ``trace_count`` traces were taken) and
writes finished traces to ``trace_file`` in Triton's format: a JSON array of
``{"id", "model_name", "model_version"[, "request_id"][, "parent_id"]}`` objects, each followed by
``{"id", "timestamps": [{"name", "ns"}]}`` objects (one per timestamp, monotonic nanoseconds like
Triton's steady clock) and, at level TENSORS, ``{"id", "activity", "tensor"}`` objects.

With ``log_frequency`` N > 0 every N traces go to ``<trace_file>.<k>`` (k = 0, 1, ...); with 0 they
are written to ``trace_file`` when the server stops. The request path pays one attribute check
(:attr:`Tracer.active`) while tracing is off. Plugins see these objects as the protocols of
:mod:`inferd.contracts.trace`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferd.contracts.errors import InvalidArgument, Unsupported
from inferd.contracts.trace import TRACE_KEY, TRACE_PARENT_KEY, TraceExporter

if TYPE_CHECKING:
    from inferd.contracts.types import InferRequest, InferTensor

log = logging.getLogger(__name__)

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
MODES = ("triton", "opentelemetry")
SETTING_NAMES = ("trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode")


@dataclass
class TraceValues:
    """One set of trace settings (global, or a model's after its overrides)."""

    level: tuple[str, ...] = ("OFF",)
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = "triton"

    def as_json(self) -> dict[str, Any]:
        """Triton's JSON: strings everywhere, a list of strings for the level."""
        return {
            "trace_level": list(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
            "log_frequency": str(self.log_frequency),
            "trace_file": self.file,
            "trace_mode": self.mode,
        }

    def with_json(self, settings: dict[str, Any]) -> TraceValues:
        """A copy with ``settings`` (trace extension names, already validated) applied."""
        v = TraceValues(**self.__dict__)
        for name, value in settings.items():
            setattr(v, _FIELD[name], value)
        return v


_FIELD = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
    "trace_file": "file",
    "trace_mode": "mode",
}


def parse_setting(name: str, value: Any) -> Any:
    """Validate one trace-extension setting from a request; return its typed value."""
    if name == "trace_level":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items) or not items:
            raise InvalidArgument(
                f"trace setting 'trace_level' must be a list of strings from {list(LEVELS)}, got {value!r}"
            )
        bad = [i for i in items if i.upper() not in LEVELS]
        if bad:
            raise InvalidArgument(
                f"trace setting 'trace_level': unknown level '{bad[0]}'; expected one of {list(LEVELS)}"
            )
        levels = tuple(dict.fromkeys(i.upper() for i in items if i.upper() != "OFF"))
        return levels or ("OFF",)
    if name in ("trace_rate", "trace_count", "log_frequency"):
        if isinstance(value, list):
            if len(value) != 1:
                raise InvalidArgument(f"Unable to parse '{name}', got: {value}; expected one value, got {len(value)}")
            value = value[0]
        try:
            number = int(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        except ValueError:
            number = None
        low = -1 if name == "trace_count" else 0
        if number is None or number < low:
            raise InvalidArgument(f"Unable to parse '{name}', got: {value}")
        return number
    if name == "trace_file":
        raise Unsupported("trace file location can not be updated through network protocol")
    if name == "trace_mode":
        raise Unsupported("trace mode can not be updated through network protocol (it is set by --trace-config mode=)")
    raise InvalidArgument(f"unknown trace setting '{name}'; known settings: {', '.join(SETTING_NAMES)}")


class RequestTrace:
    """The trace of one sampled request: timestamps (and tensors) recorded along its path."""

    __slots__ = ("id", "model_name", "model_version", "request_id", "parent_id", "tensors", "events", "_scope")

    def __init__(
        self, trace_id: int, model_name: str, model_version: int, request_id: str, scope: _Scope, parent_id: int = 0
    ) -> None:
        self.id = trace_id
        self.model_name = model_name
        self.model_version = model_version
        self.request_id = request_id
        self.parent_id = parent_id
        self.tensors = "TENSORS" in scope.values.level
        self.events: list[dict[str, Any]] = []
        self._scope = scope

    def mark(self, name: str, ns: int | None = None) -> None:
        """Record timestamp ``name`` (e.g. QUEUE_START) at ``ns`` (monotonic; default now)."""
        self.events.append(
            {"id": self.id, "timestamps": [{"name": name, "ns": time.monotonic_ns() if ns is None else ns}]}
        )

    def compute(self, start_ns: int, input_end_ns: int, output_start_ns: int, end_ns: int) -> None:
        """The four compute timestamps of one execution, as schedulers measure them."""
        self.mark("COMPUTE_START", start_ns)
        self.mark("COMPUTE_INPUT_END", input_end_ns)
        self.mark("COMPUTE_OUTPUT_START", output_start_ns)
        self.mark("COMPUTE_END", end_ns)

    def record_tensors(self, activity: str, tensors: Iterable[InferTensor]) -> None:
        """At level TENSORS: TENSOR_QUEUE_INPUT / TENSOR_BACKEND_OUTPUT entries."""
        if not self.tensors:
            return
        for t in tensors:
            self.events.append(
                {
                    "id": self.id,
                    "activity": activity,
                    "tensor": {
                        "name": t.name,
                        "data": _tensor_text(t),
                        "shape": ",".join(map(str, t.shape)),
                        "dtype": t.datatype,
                    },
                }
            )

    def to_json(self) -> list[dict[str, Any]]:
        head: dict[str, Any] = {"id": self.id, "model_name": self.model_name, "model_version": self.model_version}
        if self.request_id:
            head["request_id"] = self.request_id
        if self.parent_id:
            head["parent_id"] = self.parent_id
        return [head, *self.events]


def _tensor_text(t: InferTensor) -> str:
    """Tensor data as Triton writes it: comma-separated values (none for FP16/BF16)."""
    if t.datatype in ("FP16", "BF16"):
        return ""
    flat = t.data.ravel().tolist()
    if t.datatype == "BYTES":
        return ",".join('"' + (v.decode(errors="replace") if isinstance(v, bytes) else str(v)) + '"' for v in flat)
    if t.datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat)
    if t.datatype in ("FP32", "FP64"):
        return ",".join(format(v, "g") for v in flat)
    return ",".join(map(str, flat))


@dataclass
class _Scope:
    """A settings object with its own sampling counters and unwritten traces."""

    values: TraceValues
    overrides: dict[str, Any] = field(default_factory=dict)
    seen: int = 0
    taken: int = 0
    pending: list[list[dict[str, Any]]] = field(default_factory=list)

    def valid(self, exporter: bool) -> bool:
        """Whether this scope may sample: a level, traces left, a rate, somewhere to write."""
        v = self.values
        return (
            v.level != ("OFF",) and v.count != 0 and v.rate > 0 and (bool(v.file) if v.mode == "triton" else exporter)
        )


class TraceFiles:
    """Writes batches of traces to ``<file>`` or ``<file>.<k>`` off the event loop."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def save(self, path: str, traces: list[list[dict[str, Any]]], indexed: bool, wait: bool = False) -> None:
        if not path or not traces:
            return
        with self._lock:
            if indexed:
                k = self._index.get(path, 0)
                self._index[path] = k + 1
                target = f"{path}.{k}"
            else:
                target = path
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inferd-trace")
        future = self._executor.submit(_write, target, [obj for trace in traces for obj in trace])
        if wait:
            future.result()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def _write(target: str, objects: list[dict[str, Any]]) -> None:
    try:
        with open(target, "w", encoding="utf-8") as f:
            json.dump(objects, f, separators=(",", ":"))
    except OSError as exc:
        log.error("cannot write trace file '%s': %s", target, exc)


class Tracer:
    """Global and per-model trace settings, sampling, and the trace files of one server."""

    def __init__(self, values: TraceValues | None = None) -> None:
        self.startup = values or TraceValues()
        self.global_scope = _Scope(TraceValues(**self.startup.__dict__))
        self.models: dict[str, _Scope] = {}
        self.files = TraceFiles()
        #: ``--trace-config opentelemetry,key=value`` settings in order (``resource`` may repeat), for
        #: an OpenTelemetry exporter plugin.
        self.otel: list[tuple[str, str]] = []
        #: Receives finished traces (``RequestTrace.to_json()`` lists) in ``opentelemetry`` mode; a
        #: plugin installs one (core ships none, so that it needs no OpenTelemetry SDK).
        self.exporter: TraceExporter | None = None
        self._next_id = 1
        #: True when some scope may sample: the request path checks only this.
        self.active = False
        self._refresh()

    # -- configuration ----------------------------------------------------------------------------

    def configure(self, items: Iterable[str]) -> None:
        """Apply ``--trace-config`` values: ``level=``, ``rate=``, ``count=``, ``mode=``,
        ``triton,file=``, ``triton,log-frequency=``, ``opentelemetry,<key>=``."""
        v = self.startup
        for item in items:
            head, sep, value = item.partition("=")
            mode, _, raw_key = head.rpartition(",")
            key = raw_key.strip().replace("_", "-")
            if not sep:
                raise InvalidArgument(f"--trace-config '{item}': expected [<mode>,]<setting>=<value>")
            if mode == "opentelemetry":
                self.otel.append((raw_key.strip(), value))
            elif mode not in ("", "triton"):
                raise InvalidArgument(
                    f"--trace-config '{item}': unknown trace mode '{mode}'; expected one of {list(MODES)}"
                )
            else:
                self._configure_one(v, item, key, value)
        if v.level != ("OFF",) and not v.file and v.mode == "triton":
            log.warning(
                "tracing is on (level %s) but no trace file is set (--trace-config triton,file=PATH): "
                "no trace will be written",
                ",".join(v.level),
            )
        self.global_scope.values = TraceValues(**v.__dict__)
        self._refresh()

    @staticmethod
    def _configure_one(v: TraceValues, item: str, key: str, value: str) -> None:
        if key == "level":
            level = parse_setting("trace_level", [value])
            merged = tuple(x for x in dict.fromkeys((*v.level, *level)) if x != "OFF")
            v.level = level if level == ("OFF",) else merged
        elif key in ("rate", "count"):
            setattr(v, key, parse_setting(f"trace_{key}", value))
        elif key == "log-frequency":
            v.log_frequency = parse_setting("log_frequency", value)
        elif key == "file":
            v.file = value
        elif key == "mode":
            if value not in MODES:
                raise InvalidArgument(f"--trace-config mode={value}: expected one of {list(MODES)}")
            v.mode = value
        else:
            raise InvalidArgument(
                f"--trace-config '{item}': unknown setting '{key}'; known: level, rate, count, "
                f"mode, triton,file, triton,log-frequency"
            )

    def settings(self, model: str = "") -> dict[str, Any]:
        """Triton's trace-setting JSON for the server, or for ``model``."""
        scope = self.models.get(model, self.global_scope) if model else self.global_scope
        return scope.values.as_json()

    def update(self, settings: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Apply a trace-setting request: only the named settings change; a null value resets one
        (a model's to the global value, the global one to its start-up value)."""
        if not isinstance(settings, dict):
            raise InvalidArgument("trace setting request must be a JSON object")
        if settings.get("trace_mode") in (self.global_scope.values.mode, None):
            settings = {k: v for k, v in settings.items() if k != "trace_mode"}  # unchanged: a no-op
        parsed = {k: (None if v is None else parse_setting(k, v)) for k, v in settings.items()}
        if model:
            self._update_model(model, parsed)
        else:
            self._update_global(parsed)
        self._refresh()
        return self.settings(model)

    def _update_global(self, parsed: dict[str, Any]) -> None:
        start = self.startup.as_json()
        resets = {k: parse_setting(k, start[k]) for k, v in parsed.items() if v is None}
        changes = {**{k: v for k, v in parsed.items() if v is not None}, **resets}
        self.global_scope.values = self.global_scope.values.with_json(changes)
        for scope in self.models.values():
            scope.values = self.global_scope.values.with_json(scope.overrides)

    def _update_model(self, model: str, parsed: dict[str, Any]) -> None:
        scope = self.models.get(model)
        if scope is None:
            if not parsed:
                return
            scope = self.models[model] = _Scope(self.global_scope.values)
        for k, v in parsed.items():
            if v is None:
                scope.overrides.pop(k, None)
            else:
                scope.overrides[k] = v
        scope.values = self.global_scope.values.with_json(scope.overrides)
        if not scope.overrides:
            self._flush(scope)
            del self.models[model]

    @property
    def mode(self) -> str:
        """``triton`` or ``opentelemetry`` (the server's trace mode)."""
        return self.global_scope.values.mode

    def set_exporter(self, exporter: TraceExporter | None) -> None:
        """Install the receiver of finished traces in ``opentelemetry`` mode (a plugin's job)."""
        self.exporter = exporter
        self._refresh()

    def _refresh(self) -> None:
        exporter = self.exporter is not None
        self.active = self.global_scope.valid(exporter) or any(s.valid(exporter) for s in self.models.values())

    # -- the request path ---------------------------------------------------------------------------

    def sample(self, request: InferRequest, model: str, version: int) -> RequestTrace | None:
        """A trace for this request when its scope samples it (every ``rate``-th request), or
        when it was made by a traced request (:data:`TRACE_PARENT_KEY`)."""
        parent = request.context.get(TRACE_PARENT_KEY) if request.context else None
        if isinstance(parent, RequestTrace):
            return self._new_trace(request, model, version, parent._scope, parent.id)
        scope = self.models.get(model, self.global_scope)
        if not scope.valid(self.exporter is not None):
            return None
        scope.seen += 1
        values = scope.values
        if scope.seen % values.rate:
            return None
        if values.count > 0:
            values.count -= 1
            if values.count == 0:
                self._refresh()
        scope.taken += 1
        return self._new_trace(request, model, version, scope, 0)

    def _new_trace(
        self, request: InferRequest, model: str, version: int, scope: _Scope, parent_id: int
    ) -> RequestTrace:
        trace = RequestTrace(self._next_id, model, version, request.id, scope, parent_id)
        self._next_id += 1
        request.context[TRACE_KEY] = trace
        return trace

    def finish(self, trace: RequestTrace) -> None:
        """Keep a finished trace; write a batch when ``log_frequency`` traces are waiting, or when
        ``trace_count`` ran out."""
        scope = trace._scope
        values = scope.values
        if values.mode != "triton":
            if self.exporter is not None:  # the exporter batches (OpenTelemetry's span processor)
                self.exporter([trace.to_json()])
            return
        scope.pending.append(trace.to_json())
        if values.log_frequency and (len(scope.pending) >= values.log_frequency or values.count == 0):
            self._flush(scope, indexed=True)

    def _flush(self, scope: _Scope, indexed: bool | None = None, wait: bool = False) -> None:
        if not scope.pending:
            return
        traces, scope.pending = scope.pending, []
        self.files.save(
            scope.values.file, traces, bool(scope.values.log_frequency) if indexed is None else indexed, wait
        )

    def close(self) -> None:
        """Write every unwritten trace (at shutdown)."""
        for scope in (self.global_scope, *self.models.values()):
            self._flush(scope, wait=True)
        self.files.close()
