"""vLLM's log lines in the server's log: each names the model it concerns, the noisiest are DEBUG.

A log-record factory (:func:`install`) prefixes every ``vllm.*`` record made in this process with
``[model '<name>']`` (the model being loaded or unloaded, else the request's) and demotes the lines
on the :data:`NOISE` list to DEBUG. :func:`route` then replaces the handler vLLM gives its ``vllm``
logger with one that hands records to the server's handlers (inferd's line layout, and
``--log-verbose=1`` shows the DEBUG ones); vLLM puts its own back while an engine starts, so it is
routed again afterwards. The processes vLLM spawns for an engine write their lines themselves,
prefixed through ``VLLM_LOGGING_PREFIX`` and, unless ``VLLM_LOGGING_LEVEL`` is set, only from
WARNING up (all of them with ``--log-verbose``): both set from when an engine starts until its
process exists (:class:`_SpawnEnvironment`), one model at a time.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from inferd.api import REQUEST_MODEL
from inferd_backend_vllm import quiet
from inferd_backend_vllm.quiet import NOISE

#: The model a load or an unload concerns, while vLLM works for it.
MODEL: contextvars.ContextVar[str] = contextvars.ContextVar("inferd_vllm_model", default="")


class _Labelled:
    """A log-record factory: vLLM's records get the model's name and, when noisy, DEBUG."""

    def __init__(self, inner: Callable[..., logging.LogRecord]) -> None:
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.inner(*args, **kwargs)
        if record.name == "vllm" or record.name.startswith("vllm."):
            message = record.getMessage()
            model = MODEL.get() or REQUEST_MODEL.get()
            record.msg, record.args = (f"[model '{model}'] " if model else "[vllm] ") + message, None
            if record.levelno < logging.ERROR and any(n in message for n in NOISE):
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return record


class _ToServerLog(logging.Handler):
    """Hands vLLM's records to the root logger's handlers (the server's log)."""

    def emit(self, record: logging.LogRecord) -> None:
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def install() -> None:
    """Label vLLM's records from now on (once per process)."""
    factory: Any = logging.getLogRecordFactory()
    while factory is not None:  # vLLM wraps the factory it finds in its own
        if isinstance(factory, _Labelled):
            return
        factory = getattr(factory, "_factory", None)
    logging.setLogRecordFactory(_Labelled(logging.getLogRecordFactory()))


def route() -> None:
    """Send the ``vllm`` logger's records to the server's log (again, if vLLM reset its handler)."""
    logger = logging.getLogger("vllm")
    if len(logger.handlers) == 1 and isinstance(logger.handlers[0], _ToServerLog):
        return
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.addHandler(_ToServerLog())
    logger.propagate = False


@contextlib.contextmanager
def model_logs(
    model: str, spawns: bool = False, environ: Mapping[str, str] | None = None, directory: Path | None = None
) -> Iterator[None]:
    """While vLLM works for ``model``: its lines name the model; with ``spawns``, so do those of the
    process it starts meanwhile (not while vLLM is first imported: its layout would keep it), and
    ``environ`` holds until that process exists."""
    install()
    token = MODEL.set(model)
    environment = _SpawnEnvironment(model, environ or {}, directory) if spawns else None
    try:
        yield
    finally:
        if environment is not None:
            environment.restore()
        MODEL.reset(token)
        route()


#: Held while the environment names one model's engine process: from setting it until that process
#: exists. Two models loading at once started each other's process with the other's prefix, and put
#: back each other's variables.
_SPAWNING = threading.Lock()


class _SpawnEnvironment:
    """``VLLM_LOGGING_PREFIX`` (and ``VLLM_LOGGING_LEVEL``) naming ``model``, and ``environ``, for
    the next process vLLM starts: set under :data:`_SPAWNING`, put back, and the lock released, by a
    watcher thread as soon as a new child process exists (a spawned process copies the environment
    as it starts), or by :meth:`restore` if none does. The rest of the engine's start runs beside
    other models'."""

    NAMES = ("VLLM_LOGGING_PREFIX", "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH", "PYTHONWARNINGS")

    def __init__(self, model: str, environ: Mapping[str, str], directory: Path | None = None) -> None:
        _SPAWNING.acquire()
        self._restored = False
        self._once = threading.Lock()
        self._saved = {name: os.environ.get(name) for name in (*self.NAMES, *environ)}
        os.environ.update(environ)
        os.environ["VLLM_LOGGING_PREFIX"] = f"[model '{model}'] "
        verbose = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
        if self._saved["VLLM_LOGGING_LEVEL"] is None:  # their INFO lines are DEBUG to the server
            os.environ["VLLM_LOGGING_LEVEL"] = "DEBUG" if verbose else "WARNING"
        if not verbose and directory is not None and self._saved["VLLM_LOGGING_CONFIG_PATH"] is None:
            level = os.environ["VLLM_LOGGING_LEVEL"]
            os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(quiet.write_config(directory, f"[model '{model}'] ", level))
            warnings = self._saved["PYTHONWARNINGS"]
            os.environ["PYTHONWARNINGS"] = f"{warnings},{quiet.WARNINGS}" if warnings else quiet.WARNINGS
        self._children = set(multiprocessing.active_children())
        threading.Thread(target=self._watch, name=f"inferd-vllm-spawn-{model}", daemon=True).start()

    def _watch(self) -> None:
        while not self._restored:
            if set(multiprocessing.active_children()) - self._children:
                break
            time.sleep(0.01)
        self.restore()

    def restore(self) -> None:
        """Put the variables back and let the next model start its process (once)."""
        with self._once:
            if self._restored:
                return
            self._restored = True
            for name, value in self._saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _SPAWNING.release()
