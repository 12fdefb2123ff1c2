"""Triton's shared-memory extensions: system (POSIX) and CUDA regions, registered by clients.

:class:`~inferd.shared_memory.service.SharedMemory` answers the register / status / unregister
calls (on every worker); :mod:`~inferd.shared_memory.tensors` is what frontends use to read
inputs from regions and write outputs into them. Backends never see a region.
"""

from inferd.shared_memory.registry import Regions
from inferd.shared_memory.service import SharedMemory
from inferd.shared_memory.tensors import REGION, OutputSinks, bind_outputs, only_one_source, read_input, without_region

__all__ = [
    "REGION",
    "OutputSinks",
    "Regions",
    "SharedMemory",
    "bind_outputs",
    "only_one_source",
    "read_input",
    "without_region",
]
