"""Triton's platform <-> backend names and each backend's default model file name."""

from __future__ import annotations

from inferd.config.model_config_pb2 import ModelConfig

ENSEMBLE_PLATFORM = "ensemble"

# platform -> backend, as Triton's AutoCompleteBackendFields fills them.
_PLATFORM_TO_BACKEND: dict[str, str] = {
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "tensorrt_plan": "tensorrt",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    ENSEMBLE_PLATFORM: "",  # ensemble is a scheduler, not a backend
}

# backend -> platform Triton fills when only the backend is given. tensorflow has two platforms;
# Triton picks one from the model file name (see ``platform_for_filename``).
_BACKEND_TO_PLATFORM: dict[str, str] = {
    "tensorrt": "tensorrt_plan",
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
}

#: Triton's default ``default_model_filename`` for each backend it knows.
DEFAULT_MODEL_FILENAMES: dict[str, str] = {
    "tensorrt": "model.plan",
    "onnxruntime": "model.onnx",
    "openvino": "model.xml",
    "pytorch": "model.pt",
    "python": "model.py",
}

# Backends for which Triton checks that 'platform' and 'backend' agree.
KNOWN_PLATFORM_BACKENDS = frozenset({"tensorflow", "tensorrt", "onnxruntime", "pytorch"})


def backend_for(config: ModelConfig) -> str:
    """The backend that runs ``config``: its ``backend``, else the one its ``platform`` implies.

    Returns ``""`` for ensembles (a scheduler, not a backend) and for unknown platforms.
    """
    if config.backend:
        return config.backend
    return _PLATFORM_TO_BACKEND.get(config.platform, "")


def platform_for(backend: str, default_model_filename: str = "") -> str:
    """The ``platform`` Triton fills in for ``backend`` (``""`` where Triton fills none).

    ``tensorflow`` maps to ``tensorflow_graphdef`` when the model file is ``model.graphdef`` and
    to ``tensorflow_savedmodel`` otherwise.
    """
    if backend == "tensorflow":
        if default_model_filename == "model.graphdef":
            return "tensorflow_graphdef"
        return "tensorflow_savedmodel"
    return _BACKEND_TO_PLATFORM.get(backend, "")


def backend_of_platform(platform: str) -> str | None:
    """The backend a known platform implies, or None for an unknown platform."""
    return _PLATFORM_TO_BACKEND.get(platform)
