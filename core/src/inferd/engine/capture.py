"""Request capture: a sampled share of the requests frontends send, with their answers, written to
rotating JSON-lines files by a thread of their own (docs/traffic.md, "Capture").

``--capture-config FILE`` (YAML or JSON) turns it on; without it the data plane's ``infer`` is the
router's own, nothing in between. With it, each request costs one ``random()`` (and the model
filter); a sampled one is handed to the writer thread as references (the tensors are not copied,
nor encoded, on the event loop), and dropped and counted when the writer is ``queue`` records behind.

One line per request (the format ``inferd replay`` reads)::

    {"time": 1733450000.123, "id": "req-1", "model": "m", "version": "1", "requested_version": "",
     "tenant": null, "latency_us": 812, "parameters": {...},
     "inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": "<base64>"}],
     "outputs": [{"name": "Y", ...}], "error": null}

A tensor's ``data`` is the base64 of its raw bytes as Triton's binary extension carries them
(little-endian; BYTES elements each with a 4-byte length prefix). A redacted input is written with
``"redacted": true`` and no data; a redacted parameter as ``"<redacted>"``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import queue
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric

from inferd.auth.policy import CURRENT
from inferd.contracts.errors import InferdError
from inferd.contracts.types import InferRequest, InferResponse, InferTensor
from inferd.datatypes import array_to_bytes
from inferd.engine.capture_config import REDACTED, CaptureConfig
from inferd.engine.metric_sources import SOURCES

if TYPE_CHECKING:
    from inferd.contracts.model_info import ModelInfo

log = logging.getLogger(__name__)


Infer = Callable[..., Awaitable[InferResponse]]
Stream = Callable[..., AsyncIterator[InferResponse | InferdError]]


class Capture:
    """The sampler in front of the data plane's ``infer`` and the writer thread behind it."""

    def __init__(self, config: CaptureConfig, worker: int = 0) -> None:
        self.config = config
        self.worker = worker
        self.captured = self.dropped = self.written_files = 0
        self._pending: queue.Queue[tuple[Any, ...] | None] = queue.Queue(config.queue)
        self._thread: threading.Thread | None = None
        self._file: Any = None
        self._size = 0
        self._sequence = 0
        self._lock = threading.Lock()
        self._collector = _Collector(self)
        SOURCES.add(self._collector)

    def start(self) -> None:
        """Create the directory and start the writer thread (blocking: call it off the loop or at start)."""
        self.config.dir.mkdir(parents=True, exist_ok=True)
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_loop, name="inferd-capture", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Write what is waiting, close the file, stop the thread."""
        SOURCES.remove(self._collector)
        if self._thread is not None:
            self._pending.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every record handed over so far is written (tests, ``inferd`` shutdown)."""
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    # -- the request path ---------------------------------------------------------------------

    def wrap(self, infer: Infer, stream: Stream) -> tuple[Infer, Stream]:
        """``infer`` and ``stream`` with a sampled share of their requests captured."""
        rate, models, offer = self.config.rate, self.config.models, self._offer

        async def captured_infer(request: InferRequest, model: ModelInfo | None = None) -> InferResponse:
            if random.random() >= rate or (models and request.model_name not in models):
                return await infer(request, model)
            start = time.perf_counter_ns()
            try:
                response = await infer(request, model)
            except InferdError as exc:
                offer(request, None, exc, time.perf_counter_ns() - start)
                raise
            offer(request, response, None, time.perf_counter_ns() - start)
            return response

        def captured_stream(
            request: InferRequest, model: ModelInfo | None = None
        ) -> AsyncIterator[InferResponse | InferdError]:
            if random.random() >= rate or (models and request.model_name not in models):
                return stream(request, model)
            return one(request, stream(request, model))

        async def one(
            request: InferRequest, inner: AsyncIterator[InferResponse | InferdError]
        ) -> AsyncIterator[InferResponse | InferdError]:
            start = time.perf_counter_ns()
            items = 0
            last: InferResponse | InferdError | None = None
            async for item in inner:
                items += 1
                last = item
                yield item
            if items == 1:  # one answer (not a decoupled stream of several): captured like infer's
                ns = time.perf_counter_ns() - start
                if isinstance(last, InferResponse):
                    offer(request, last, None, ns)
                elif isinstance(last, InferdError):
                    offer(request, None, last, ns)

        return captured_infer, captured_stream

    def _offer(self, request: InferRequest, response: InferResponse | None, error: InferdError | None, ns: int) -> None:
        grant = CURRENT.get()
        tenant = grant.tenant.name if grant is not None and grant.tenant is not None else None
        if tenant is not None and not self.config.tenants.get(tenant, True):
            return
        try:
            self._pending.put_nowait((time.time(), request, response, error, ns, tenant))
        except queue.Full:
            self.dropped += 1
            return
        self.captured += 1

    # -- the writer thread --------------------------------------------------------------------

    def _write_loop(self) -> None:
        pending = self._pending
        while True:
            item = pending.get()
            try:
                if item is None:
                    if self._file is not None:
                        self._file.close()
                        self._file = None
                    return
                try:
                    line = (json.dumps(self.record(*item), separators=(",", ":")) + "\n").encode()
                    self._write(line)
                except Exception:  # a record that cannot be written is logged, never raised at the server
                    log.exception("capture: a record could not be written to %s", self.config.dir)
            finally:
                pending.task_done()

    def record(
        self,
        at: float,
        request: InferRequest,
        response: InferResponse | None,
        error: InferdError | None,
        ns: int,
        tenant: str | None,
    ) -> dict[str, Any]:
        """One request as a JSON-able record (the documented format)."""
        c = self.config
        redacted = c.redact_parameters
        parameters = {k: (REDACTED if k.lower() in redacted else _json_value(v)) for k, v in request.parameters.items()}
        keep = c.tensors
        inputs = [_tensor(t, t.name in c.redact_inputs) for t in request.inputs.values() if not keep or t.name in keep]
        outputs = (
            [_tensor(t, t.name in c.redact_outputs) for t in response.outputs if not keep or t.name in keep]
            if response is not None
            else []
        )
        return {
            "time": round(at, 6),
            "id": request.id,
            "model": request.model_name,
            "version": response.model_version if response is not None else "",
            "requested_version": request.model_version,
            "tenant": tenant,
            "latency_us": ns // 1000,
            "parameters": parameters,
            "requested_outputs": [o.name for o in request.outputs],
            "inputs": inputs,
            "outputs": outputs,
            "error": {"message": error.message, "kind": error.kind.name} if error is not None else None,
        }

    def _write(self, line: bytes) -> None:
        if self._file is None or self._size + len(line) > self.config.max_file_bytes and self._size:
            self._rotate()
        self._file.write(line)
        self._file.flush()
        self._size += len(line)

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
        self._sequence += 1
        name = f"capture-{time.strftime('%Y%m%dT%H%M%S')}-w{self.worker}-{os.getpid()}-{self._sequence:06d}.jsonl"
        self._file = open(self.config.dir / name, "ab")  # noqa: SIM115 - kept open across records
        self._size = 0
        self.written_files += 1
        mine = sorted(self.config.dir.glob(f"capture-*-w{self.worker}-{os.getpid()}-*.jsonl"))
        for old in mine[: max(0, len(mine) - self.config.max_files)]:
            with contextlib.suppress(OSError):
                old.unlink()

    def figures(self) -> dict[str, int]:
        return {"captured": self.captured, "dropped": self.dropped, "files": self.written_files}


def _tensor(t: InferTensor, redact: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
    if redact:
        entry["redacted"] = True
    else:
        entry["data"] = base64.b64encode(array_to_bytes(t.data, t.datatype)).decode()
    return entry


def _json_value(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every record of a capture file, or of every ``*.jsonl`` file in a directory (oldest first),
    as they were when called: what a capturing server appends meanwhile is left out."""
    files = sorted(path.glob("*.jsonl"), key=lambda p: (p.stat().st_mtime, p.name)) if path.is_dir() else [path]
    sizes = [(file, file.stat().st_size) for file in files]
    for file, size in sizes:
        with file.open("rb") as f:
            data = f.read(size)
        for number, line in enumerate(data.splitlines(), 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{file}:{number}: not a capture record: {exc.msg}") from None


class _Collector:
    """``inferd_capture_records_total{outcome="captured"|"dropped"}``."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture

    def collect(self) -> Iterator[Any]:
        name = "inferd_capture_records_total"
        family = Metric(name, "Requests sampled for capture (dropped: the writer was behind)", "counter")
        family.name = name  # as named: prometheus_client would drop a counter's "_total"
        family.add_sample(name, {"outcome": "captured"}, self.capture.captured)
        family.add_sample(name, {"outcome": "dropped"}, self.capture.dropped)
        yield family
