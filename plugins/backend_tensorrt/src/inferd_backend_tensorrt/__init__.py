"""inferd's TensorRT backend: serves serialized TensorRT engines (``model.plan``) on NVIDIA GPUs."""

__version__ = "0.1.0"
