"""vLLM's known start-up noise, quiet in the processes an engine starts too.

In the server's process :mod:`inferd_backend_vllm.logs` demotes the lines on the ``NOISE`` list to
DEBUG. The engine's own processes log through the logging configuration vLLM reads from
``VLLM_LOGGING_CONFIG_PATH``: :func:`write_config` writes vLLM's default one (the model's prefix,
its level) with :class:`NoiseFilter` on its handler, and :data:`WARNINGS` (``PYTHONWARNINGS``)
silences torch's deprecation warnings that vLLM's own imports trigger. With ``--log-verbose`` all
of it shows, as before.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

#: Fragments of the lines a user serving a model does not need: DEBUG.
NOISE = (
    "Triton",
    "weights",
    "checkpoint",
    "Checkpoint",
    "Auto-prefetch",
    "[shutdown]",
    "Passing raw prompts",
    "Enforce eager",
    "Inductor compilation",
    "IR op priority",
    "custom fusions",
    "Chunked prefill",
    "Reset SSM cache type",
    "LD_PRELOAD",
)

#: Python warnings that vLLM's import of torch raises in every engine process, about vLLM's code.
WARNINGS = "ignore:`torch.distributed.reduce_op` is deprecated:FutureWarning"

#: vLLM's line layout (vllm.logger's ``_FORMAT``) after the prefix.
FORMAT = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"


class NoiseFilter(logging.Filter):
    """Drops the ``NOISE`` lines below ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not any(n in record.getMessage() for n in NOISE)


def write_config(directory: Path, prefix: str, level: str) -> Path:
    """vLLM's default logging configuration with :class:`NoiseFilter`, as a file in ``directory``."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": "%m-%d %H:%M:%S",
                     "format": prefix + FORMAT, "log_level": level},
        },
        "filters": {"noise": {"()": f"{__name__}.NoiseFilter"}},
        "handlers": {
            "vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": level,
                     "stream": "ext://sys.stdout", "filters": ["noise"]},
        },
        "loggers": {"vllm": {"handlers": ["vllm"], "level": level, "propagate": False}},
    }  # fmt: skip
    path = directory / "vllm-logging.json"
    path.write_text(json.dumps(config))
    return path


#: Whether :func:`explain_once` has explained.
_explained = False


def explain_once() -> None:
    """After the first engine of the process started on a CPU: one line on what its processes
    printed of their own, before vLLM's logging was set up (not theirs to filter)."""
    global _explained
    if _explained:
        return
    _explained = True
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        log.info(
            "vLLM on the CPU: the engine's processes print 'Triton is installed, but doesn't include CPU backend' "
            "(vLLM runs without Triton here), torch's 'NUMA binding' warning and a checkpoint loading bar before "
            "vLLM's logging starts: expected, nothing to fix (docs/llm.md, 'Start-up messages')"
        )
