"""inferd backend "python": runs Triton ``model.py`` files (``TritonPythonModel``) in-process."""

__version__ = "0.1.0"
