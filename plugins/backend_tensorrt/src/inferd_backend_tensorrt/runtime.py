"""TensorRT itself: imported when a model first needs it, its process-wide logger, deserializing plans."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from inferd.api import InvalidArgument, Unavailable
from inferd_backend_tensorrt import cuda

#: TensorRT engine creation is not thread-safe: deserializations are serialized.
_DESERIALIZE_LOCK = threading.Lock()


def import_tensorrt(model: str) -> Any:
    """The ``tensorrt`` module; raises Unavailable naming the model and the fix when it is missing."""
    try:
        import tensorrt
    except ImportError as exc:
        raise Unavailable(
            f"model '{model}': the TensorRT backend needs the 'tensorrt' package, which is not installed "
            f"({exc}); {cuda.INSTALL_HINT}"
        ) from None
    return tensorrt


def require(model: str) -> tuple[Any, int]:
    """TensorRT, the CUDA bindings and a GPU: ``(tensorrt module, number of GPUs)``."""
    trt = import_tensorrt(model)
    try:
        cuda.runtime()
    except Unavailable as exc:
        raise Unavailable(f"model '{model}': {exc.message}") from None
    return trt, cuda.require_gpus(model)


class Logger:
    """One TensorRT logger for the process, forwarding warnings and errors to ``logging``."""

    instance: Any = None

    @classmethod
    def get(cls, trt: Any) -> Any:
        if cls.instance is None:
            cls.instance = trt.Logger(trt.Logger.WARNING)
        return cls.instance


def new_runtime(trt: Any) -> Any:
    """A ``trt.Runtime`` logging through the process's logger."""
    return trt.Runtime(Logger.get(trt))


def deserialize(trt: Any, runtime: Any, plan: bytes, model: str, path: Path) -> Any:
    """``runtime.deserialize_cuda_engine(plan)``; raises InvalidArgument when TensorRT refuses it."""
    with _DESERIALIZE_LOCK:
        engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise InvalidArgument(
            f"model '{model}': TensorRT {trt.__version__} could not deserialize '{path}' (a plan built by another "
            f"TensorRT version or for another GPU, or not a plan; see the TensorRT messages in the log)"
        )
    return engine
