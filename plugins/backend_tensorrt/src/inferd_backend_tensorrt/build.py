"""Building a TensorRT engine (``model.plan``) from an ONNX model, for tests and quick starts.

Production engines are usually built with ``trtexec`` on the GPU that will serve them; this is
the same thing in a few lines of Python, with explicit optimization profiles::

    plan = build_engine(onnx_bytes, [{"INPUT0": ((1, 4), (8, 4), (32, 4))}])
    Path("models/m/1/model.plan").write_bytes(plan)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inferd.api import InvalidArgument

Shape = tuple[int, ...]
#: One optimization profile: ``{input name: (min shape, opt shape, max shape)}``.
Profile = Mapping[str, tuple[Shape, Shape, Shape]]


def build_engine(
    onnx_model: bytes,
    profiles: Sequence[Profile] = (),
    *,
    fp16: bool = False,
    tf32: bool = False,
    workspace_mib: int = 512,
) -> bytes:
    """Parse ``onnx_model`` with TensorRT's ONNX parser and build a serialized engine on the
    current GPU. Each profile gives every dynamic input its (min, opt, max) shapes. TF32 math is
    off unless asked for, so FP32 results match numpy closely."""
    from inferd_backend_tensorrt.runtime import import_tensorrt

    trt = import_tensorrt("(engine build)")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if int(trt.__version__.split(".")[0]) < 10:  # explicit batch is the only mode from TensorRT 10
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_model):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise InvalidArgument(f"TensorRT's ONNX parser rejected the model: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if not tf32 and hasattr(trt.BuilderFlag, "TF32"):
        config.clear_flag(trt.BuilderFlag.TF32)
    for shapes in profiles:
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in shapes.items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise InvalidArgument("TensorRT could not build the engine (see the TensorRT messages in the log)")
    return bytes(plan)
