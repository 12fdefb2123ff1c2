"""What a vLLM engine holds on its GPUs, for the memory budget of on-demand loading
(``Model.memory_usage``, plugin API 1.2).

vLLM sizes itself on each device it runs on to ``gpu_memory_utilization`` of the device's memory
(weights, activations and the KV cache it then fills): that share is what the engine holds, read
once when it loads. Its devices are ``cuda:0`` .. ``cuda:<world size - 1>`` of those this process
sees. Off CUDA (the CPU build) the engine holds no device memory: nothing is reported.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("inferd.vllm")


def engine_device_bytes(engine: Any) -> dict[str, int]:
    """``{"cuda:i": gpu_memory_utilization x device i's memory}`` for each device ``engine`` (an
    ``AsyncLLM``) runs on; {} off CUDA, or when vLLM cannot say."""
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return {}
    try:
        config = engine.vllm_config
        share = float(config.cache_config.gpu_memory_utilization)
        devices = int(config.parallel_config.world_size)
        return {f"cuda:{i}": int(share * current_platform.get_device_total_memory(i)) for i in range(devices)}
    except Exception as exc:  # a vLLM that moved these: the budget goes on without the report
        log.warning("the vLLM engine's GPU memory is unknown (%s: %s); the device budget does not count it",
                    type(exc).__name__, exc)  # fmt: skip
        return {}
