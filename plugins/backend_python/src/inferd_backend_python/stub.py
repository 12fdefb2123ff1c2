"""The stub process of an isolated Python model (``EXECUTION_MODE: process``): one per instance.

The server starts it with ``python -c BOOT <fd> <package dirs>`` (:data:`BOOT`): the server's own
interpreter, or the one of the model's ``EXECUTION_ENV_PATH``. It imports ``model.py`` with the same
loader as the in-process backend and runs ``execute`` through the same
:class:`~inferd_backend_python.backend.PythonInstance`, so ``pb_utils`` behaves the same. Requests
and responses cross :mod:`~inferd_backend_python.ipc` (tensors in shared memory). BLS calls go to
the server, which runs them through its in-process BLS path; logging and custom metrics are
forwarded to the server too. The stub exits when the server closes the socket (or dies).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from inferd.backend import RESCHEDULE
from inferd.errors import InferdError
from inferd.types import InferRequest, InferResponse
from inferd_backend_python import ipc, pb_metrics
from inferd_backend_python.backend import PythonInstance, run_auto_complete, start_model_object
from inferd_backend_python.loader import check_model_class, import_model_file
from inferd_backend_python.pb_request import ModelBinding, bind
from inferd_backend_python.wire import decode_error, decode_outcome, decode_request, encode_outcome, encode_request

#: What the server runs: ``python -c BOOT <socket fd> <in ring fd>,<out ring fd>,<ring size> <inferd dir>
#: <inferd_backend_python dir> <pb_utils dir>``.
#: It imports the server's own copies of these packages by path, so an execution environment
#: needs only numpy, and reports a failed import on the socket before anything else runs.
BOOT = """
import sys, importlib.util
if sys.path and sys.path[0] == "":
    del sys.path[0]
fd, rings, dirs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path + "/__init__.py", submodule_search_locations=[path])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
try:
    load("inferd", dirs[0])
    load("inferd_backend_python", dirs[1])
    from inferd_backend_python import stub
except BaseException as exc:
    import marshal, socket
    socket.socket(fileno=fd).send(marshal.dumps((11, ("%s: %s" % (type(exc).__name__, exc), "import"), None)))
    raise SystemExit(3)
stub.main(fd, rings, load, dirs[2])
"""


def main(fd: int, rings: str, load: Callable[[str, str], None], pb_utils_dir: str) -> None:
    """Serve the server on the socket ``fd`` until it closes it or asks the stub to finish."""
    load("triton_python_backend_utils", pb_utils_dir)
    in_fd, out_fd, size = (int(n) for n in rings.split(","))
    in_ring, out_ring = ipc.Ring(in_fd, size), ipc.Ring(out_fd, size)
    os.close(in_fd)
    os.close(out_fd)
    Stub(ipc.Channel(socket.socket(fileno=fd), out_ring, in_ring)).run()


class _LogForwarder(logging.Handler):
    """Sends the model's log records to the server, which logs them with its own settings."""

    def __init__(self, channel: ipc.Channel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
            self.channel.send(ipc.LOG, (record.levelno, record.name, message))
        except Exception:
            pass


class _ServerClient:
    """The server's models, for the model's BLS calls: each call goes to the server and back."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub
        self._ids = itertools.count(1)

    def _call(self, request: InferRequest, decoupled: bool) -> tuple[int, queue.SimpleQueue]:
        call_id = next(self._ids)
        replies: queue.SimpleQueue = queue.SimpleQueue()
        self._stub.calls[call_id] = replies
        tensors = ipc.Tensors()
        item = encode_request(request, tensors)
        self._stub.channel.send(ipc.BLS_CALL, (call_id, decoupled, item), tensors)
        return call_id, replies

    def infer_from_thread(self, request: InferRequest) -> InferResponse:
        call_id, replies = self._call(request, False)
        try:
            (_, what, payload), block = replies.get()
        finally:
            self._stub.calls.pop(call_id, None)
        if what == "raise":
            raise decode_error(payload)
        return decode_outcome(payload, block)  # type: ignore[return-value]

    def stream_from_thread(self, request: InferRequest) -> Iterator[InferResponse | InferdError]:
        call_id, replies = self._call(request, True)
        (_, what, payload), _ = replies.get()
        if what == "raise":
            self._stub.calls.pop(call_id, None)
            raise decode_error(payload)
        return self._items(call_id, replies)

    def _items(self, call_id: int, replies: queue.SimpleQueue) -> Iterator[InferResponse | InferdError]:
        try:
            while True:
                (_, what, payload), block = replies.get()
                if what == "end":
                    return
                yield decode_outcome(payload, block)  # type: ignore[misc]
        finally:
            self._stub.calls.pop(call_id, None)


class Stub:
    """The stub's state: the control channel, the instance, and the BLS calls waiting for replies."""

    def __init__(self, channel: ipc.Channel) -> None:
        self.channel = channel
        self.calls: dict[int, queue.SimpleQueue] = {}
        self.instance: PythonInstance | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def run(self) -> None:
        first = self.channel.recv()
        if first is None:
            return
        kind, body, _ = first
        logging.getLogger().addHandler(_LogForwarder(self.channel))
        if kind == ipc.AUTOCOMPLETE:
            self._reply(lambda: self._autocomplete(*body))
            return
        if kind != ipc.INIT or not self._reply(lambda: self._init(body)):
            return
        threading.Thread(target=self._work, name="inferd-python-execute", daemon=True).start()
        while (message := self.channel.recv()) is not None:
            kind, body, block = message
            if kind == ipc.EXEC:
                self._jobs.put((body, block))
            elif kind == ipc.BLS_REPLY:
                replies = self.calls.get(body[0])
                if replies is not None:
                    replies.put((body, block))
            elif kind == ipc.FINALIZE:
                self._jobs.put(None)
        _exit(0)  # the server closed the socket: it is unloading us, or gone

    def _reply(self, work: Callable[[], Any]) -> bool:
        """Run ``work``; send READY with its result or FAILED with the error. True when it worked."""
        try:
            result = work()
        except InferdError as exc:
            self.channel.send(ipc.FAILED, (exc.message, exc.kind.value))
            return False
        except BaseException as exc:
            self.channel.send(ipc.FAILED, (f"{type(exc).__name__}: {exc}", "INTERNAL"))
            return False
        self.channel.send(ipc.READY, result)
        return True

    def _init(self, settings: dict[str, Any]) -> int:
        logging.getLogger().setLevel(settings["log_level"])
        if settings.get("cpus"):
            os.sched_setaffinity(0, settings["cpus"])
        name, version, path = settings["name"], settings["version"], Path(settings["path"])
        model_dir = Path(settings["model_dir"])
        binding = ModelBinding(name, version, model_dir, settings["decoupled"], _ServerClient(self))
        pb_metrics.FAMILIES.model_loaded(binding)
        pb_metrics.FAMILIES.mirror = self._metric
        module = import_model_file(name, version, path, model_dir)
        cls = check_model_class(module, f"model '{name}'", path)
        args = settings["args"]
        obj = start_model_object(cls, args, binding, path)
        self.instance = PythonInstance(binding, settings["iterative"], obj, args["model_instance_name"])
        return os.getpid()

    def _autocomplete(self, config: dict[str, Any], name: str, path: str, model_dir: str, version: str) -> Any:
        from inferd_backend_python.loader import forget_package

        module = import_model_file(name, version, Path(path), Path(model_dir))
        try:
            hook = getattr(module.TritonPythonModel, "auto_complete_config", None)
            if hook is None:
                return None
            bind(ModelBinding(name, "", Path(model_dir), False))
            return run_auto_complete(config, hook, name, path)
        finally:
            forget_package(module.__name__.rpartition(".")[0])

    def _metric(self, *operation: Any) -> None:
        try:
            self.channel.send(ipc.METRIC, operation)
        except OSError:
            pass

    def _work(self) -> None:
        """Run the batches the server sends, one at a time, on this thread."""
        instance = self.instance
        assert instance is not None
        while (job := self._jobs.get()) is not None:
            (batch_id, items), block = job
            senders = [self._sender(batch_id, i) if item[6] else None for i, item in enumerate(items)]
            requests = [decode_request(item, block, s) for item, s in zip(items, senders, strict=True)]
            del job, block  # the input arrays keep the mapping alive as long as the model holds them
            try:
                results = instance.execute(requests)
            except BaseException as exc:  # SystemExit and the like: fail the batch, keep serving
                error = InferdError(
                    f"Failed to process the request(s) for model '{requests[0].model_name}', message: "
                    f"{type(exc).__name__}: {exc}"
                )
                results = [] if senders[0] is not None else [error] * len(requests)
                for send in senders:
                    if send is not None:
                        send(error, True)
            tensors = ipc.Tensors()
            encoded = [encode_outcome(r, tensors) for r in results]
            rescheduled = [i for i, r in enumerate(requests) if r.context.get(RESCHEDULE)]
            self.channel.send(ipc.RESULT, (batch_id, encoded, rescheduled), tensors)
        instance.close()
        self.channel.send(ipc.FINALIZED, None)
        _exit(0)

    def _sender(self, batch_id: int, index: int) -> Callable[[InferResponse | InferdError | None, bool], None]:
        def send(outcome: InferResponse | InferdError | None, final: bool) -> None:
            tensors = ipc.Tensors()
            payload = encode_outcome(outcome, tensors)
            self.channel.send(ipc.SEND, (batch_id, index, payload, bool(final)), tensors)

        return send


def _exit(code: int) -> None:
    """Leave now, whatever threads the model started (they would keep a normal exit waiting)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
