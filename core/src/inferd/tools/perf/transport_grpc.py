"""KServe v2 gRPC: requests serialized once per entry (raw tensor contents), sent as bytes through
the synchronous channel's futures (cheaper per call than grpc.aio; see :mod:`transport`).

A protobuf message followed by another's bytes parses as the two merged, so per-request fields
(the stream request id, sequence parameters) are appended as a few serialized bytes instead of
re-encoding the tensors.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from inferd.tools.perf.inputs import Entry, raw_bytes
from inferd.tools.perf.options import PerfOptions
from inferd.tools.perf.shm import Placed
from inferd.tools.perf.transport import ControlMixin, Done, RequestError, SequenceFlags, strip_scheme

_SERVICE = "/inference.GRPCInferenceService/"
_MAX = 2**31 - 1
_FINAL = "triton_final_response"


def _suffix(request_id: str, seq: SequenceFlags) -> bytes:
    """Serialized ``id`` and sequence parameters, to append to an encoded request."""
    msg = service_pb2.ModelInferRequest(id=request_id)
    if seq is not None:
        msg.parameters["sequence_id"].int64_param = seq[0]
        msg.parameters["sequence_start"].bool_param = seq[1]
        msg.parameters["sequence_end"].bool_param = seq[2]
    return msg.SerializeToString()


def _in_region(params: Any, region: str, size: int) -> None:
    params["shared_memory_region"].string_param = region
    params["shared_memory_byte_size"].int64_param = size


def _rpc_error(exc: BaseException) -> RequestError:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return RequestError(f"inference failed with gRPC {exc.code().name}: {exc.details()}")
    return RequestError(f"inference failed: {exc}")


class GrpcTransport(ControlMixin):
    """Unary calls (or one bidirectional stream with ``--streaming``) with bytes in and out;
    tritonclient's aio client for control calls."""

    _exc = InferenceServerException

    def __init__(self, opts: PerfOptions) -> None:
        self.opts = opts
        url = strip_scheme(opts.url)
        self._client = grpcaio.InferenceServerClient(url)
        options = [("grpc.max_send_message_length", _MAX), ("grpc.max_receive_message_length", _MAX)]
        self._channel = grpc.insecure_channel(url, options=options)
        self._unary = self._channel.unary_unary(_SERVICE + "ModelInfer")
        self._stream: _Stream | None = None

    async def _get_config(self) -> Any:
        response = await self._client.get_model_config(self.opts.model, self.opts.version)
        return response.config

    def prepare(self, entry: Entry, datatypes: dict[str, str], placed: Placed | None = None) -> bytes:
        msg = service_pb2.ModelInferRequest(model_name=self.opts.model, model_version=self.opts.version)
        for name, array in entry.items():
            tensor = msg.inputs.add(name=name, datatype=datatypes[name], shape=list(array.shape))
            if placed is None:
                msg.raw_input_contents.append(raw_bytes(array, datatypes[name]))
            else:
                _in_region(tensor.parameters, *placed.inputs[name])
        for name, (region, size) in placed.outputs.items() if placed is not None else ():
            _in_region(msg.outputs.add(name=name).parameters, region, size)
        if self.opts.streaming and self.decoupled:
            msg.parameters["triton_enable_empty_final_response"].bool_param = True
        return msg.SerializeToString()

    def send(self, prepared: bytes, seq: SequenceFlags, done: Done) -> None:
        if self.opts.streaming:
            if self._stream is None:
                self._stream = _Stream(self._channel, self.decoupled)
            self._stream.send(prepared, seq, done)
            return
        send_ns = 0
        if seq is not None:
            t0 = time.perf_counter_ns()
            prepared = prepared + _suffix("", seq)
            send_ns = time.perf_counter_ns() - t0

        def finish(future: Any) -> None:
            exc = future.exception()
            if exc is not None:
                done(send_ns, 0, 0, 0, _rpc_error(exc))
                return
            t1 = time.perf_counter_ns()
            service_pb2.ModelInferResponse.FromString(future.result())
            done(send_ns, time.perf_counter_ns() - t1, 1, 0, None)

        self._unary.future(prepared).add_done_callback(finish)

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._channel.close()
        await self._client.close()


class _Stream:
    """One ``ModelStreamInfer`` stream shared by all in-flight requests, matched by request id;
    a reader thread takes the responses.

    A request is complete at its response (ordinary model) or at the response flagged
    ``triton_final_response`` (decoupled model, which may send any number of responses).
    """

    def __init__(self, channel: grpc.Channel, decoupled: bool) -> None:
        self._decoupled = decoupled
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        # id -> [done, send_ns, first_response_at_ns, responses, recv_ns]
        self._pending: dict[str, list[Any]] = {}
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._responses = channel.stream_stream(_SERVICE + "ModelStreamInfer")(self._requests())
        self._reader = threading.Thread(target=self._read, name="inferd-perf-stream", daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[bytes]:
        while (item := self._outbox.get()) is not None:
            yield item

    def send(self, prepared: bytes, seq: SequenceFlags, done: Done) -> None:
        t0 = time.perf_counter_ns()
        request_id = str(next(self._ids))
        body = prepared + _suffix(request_id, seq)
        with self._lock:
            self._pending[request_id] = [done, time.perf_counter_ns() - t0, 0, 0, 0]
        self._outbox.put(body)

    def _read(self) -> None:
        try:
            for raw in self._responses:
                self._on_response(raw)
        except grpc.RpcError as exc:
            self._fail(_rpc_error(exc))
            return
        self._fail(RequestError("the server closed the inference stream"))

    def _on_response(self, raw: bytes) -> None:
        t0 = time.perf_counter_ns()
        msg = service_pb2.ModelStreamInferResponse.FromString(raw)
        response = msg.infer_response
        with self._lock:
            state = self._pending.get(response.id)
            if state is None:
                return
            if msg.error_message:
                del self._pending[response.id]
        if msg.error_message:
            state[0](
                state[1],
                state[4],
                state[3],
                state[2],
                RequestError(f"inference failed on the stream: {msg.error_message}"),
            )
            return
        flag = response.parameters.get(_FINAL) if self._decoupled else None
        final = (not self._decoupled) or (flag is not None and flag.bool_param)
        if response.outputs or not final:
            state[3] += 1
            state[2] = state[2] or t0
        state[4] += time.perf_counter_ns() - t0
        if final:
            with self._lock:
                self._pending.pop(response.id, None)
            state[0](state[1], state[4], state[3], state[2], None)

    def _fail(self, error: RequestError) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for state in pending.values():
            state[0](state[1], state[4], state[3], state[2], error)

    def close(self) -> None:
        self._outbox.put(None)
        self._reader.join(timeout=5)
        if self._reader.is_alive():
            self._responses.cancel()
