"""inferd: a Triton-compatible inference server built from plugins. Plugins import :mod:`inferd.api`."""

__version__ = "1.0.0"
