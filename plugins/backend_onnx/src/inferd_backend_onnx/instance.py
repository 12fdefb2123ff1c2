"""One ONNX Runtime instance: a session of its own, run on numpy arrays.

``session.run`` releases the GIL, so instances of one model compute in parallel on their own threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from inferd.api import ArrayInstance, InferdError, InternalError, InvalidArgument
from inferd_backend_onnx.session import ort_message
from inferd_backend_onnx.signature import GraphTensor, graph_tensors, run_output_names

if TYPE_CHECKING:
    from inferd.api import ModelLoadContext


class OnnxInstance(ArrayInstance):
    """One ``InferenceSession``; converts BYTES tensors and scalar shapes around ``session.run``."""

    #: ``session.run`` waits on nothing of the server's and is thread-safe: a small model's quick
    #: executions run on the event loop (see ``inferd.engine.runner.INLINE_LIMIT_NS``).
    may_run_inline = True

    def __init__(self, context: ModelLoadContext, session: Any, run_options: Any) -> None:
        """``session``: this instance's ``InferenceSession``; ``run_options``: the model's ``RunOptions``."""
        config = context.config
        super().__init__(context.name, context.version, config.max_batch_size)
        self.session = session
        self.run_options = run_options
        self.output_names = run_output_names(config)  # state outputs too
        graph_in = {t.name: t for t in graph_tensors([*session.get_inputs(), *session.get_overridable_initializers()])}
        graph_out = {t.name: t for t in graph_tensors(session.get_outputs())}
        self._string_inputs = frozenset(n for n, i in graph_in.items() if i.is_string)
        self._string_outputs = frozenset(n for n in self.output_names if graph_out[n].is_string)
        # A model scalar that the config declares as [1] (and has no config reshape, which core
        # applies) is reshaped here on the way in, and back to the config's dims on the way out.
        self._input_shapes = {
            t.name: () for t in config.input if not t.HasField("reshape") and _is_scalar(graph_in.get(t.name))
        }
        self._output_dims = {
            t.name: tuple(t.dims) for t in config.output if t.HasField("reshape") or _is_scalar(graph_out[t.name])
        }
        self._prepare_inputs = bool(self._string_inputs or self._input_shapes)
        self._finish_outputs = bool(self._string_outputs or self._output_dims)

    def run(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        feed = self._prepare(inputs) if self._prepare_inputs else dict(inputs)
        try:
            results = self.session.run(self.output_names, feed, self.run_options)
        except Exception as exc:
            raise _map_error(self.model_name, exc) from None
        outputs = dict(zip(self.output_names, results, strict=True))
        if self._finish_outputs:
            self._finish(outputs)
        return outputs

    def _prepare(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = dict(inputs)
        for name in self._string_inputs.intersection(feed):
            feed[name] = _bytes_to_str(self.model_name, name, feed[name])
        for name, shape in self._input_shapes.items():
            if name in feed:
                feed[name] = feed[name].reshape(shape)
        return feed

    def _finish(self, outputs: dict[str, np.ndarray]) -> None:
        for name in self._string_outputs:
            outputs[name] = _str_to_bytes(outputs[name])
        batching = self.max_batch_size > 0
        for name, dims in self._output_dims.items():
            value = outputs[name]
            outputs[name] = value.reshape(((value.shape[0],) if batching and value.ndim else ()) + dims)

    def close(self) -> None:
        self.session = None


def _is_scalar(tensor: GraphTensor | None) -> bool:
    return tensor is not None and not tensor.dims


def _bytes_to_str(model: str, name: str, array: np.ndarray) -> np.ndarray:
    """BYTES items (``bytes``) -> ``str``, which is what onnxruntime's Python API takes for strings."""
    flat = array.reshape(-1)
    out = np.empty(flat.shape, dtype=object)
    try:
        out[:] = [v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v) for v in flat]
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"model '{model}': input '{name}' holds an element that is not valid UTF-8 ({exc.reason} at byte "
            f"{exc.start}); onnxruntime's Python API passes string tensors as text"
        ) from None
    return out.reshape(array.shape)


def _str_to_bytes(array: np.ndarray) -> np.ndarray:
    flat = array.reshape(-1)
    out = np.empty(flat.shape, dtype=object)
    out[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat]
    return out.reshape(array.shape)


def _map_error(model: str, exc: Exception) -> InferdError:
    """onnxruntime's INVALID_ARGUMENT (wrong rank, type, missing input) is the client's; the rest internal."""
    message = ort_message(exc)
    if isinstance(exc, (ort_state.InvalidArgument, ValueError, TypeError)):
        return InvalidArgument(f"model '{model}': onnxruntime rejected the request: {message}")
    return InternalError(f"model '{model}': onnxruntime failed to run the request: {type(exc).__name__}: {message}")
