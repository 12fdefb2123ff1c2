"""inferd: a Triton-compatible inference server built from plugins."""

__version__ = "0.1.0"
