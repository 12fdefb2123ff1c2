"""inferd: a Triton-compatible inference server built from plugins."""

__version__ = "0.1.0"

from inferd.moved import install as _install_moved_modules

_install_moved_modules()
