"""vLLM's ``AsyncLLM`` driven on the server's event loop, one task per request.

The engine core runs in a process vLLM starts (spawned); this side only hands it requests and
turns its outputs into responses, on the server's own loop as ``vllm serve`` does on its: the
instance is an ``AsyncInstance``, so requests come in and responses go
out with no thread hop. Continuous batching is the engine's: every request submitted here goes
to it at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from prometheus_client import CollectorRegistry
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.exceptions import VLLMClientError
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
from vllm.outputs import PoolingRequestOutput, RequestOutput
from vllm.renderers import TokenizeParams
from vllm.v1.engine.async_llm import AsyncLLM

from inferd.api import (
    Cancelled,
    InferdError,
    InferRequest,
    InferResponse,
    InferTensor,
    InternalError,
    InvalidArgument,
    Unavailable,
)
from inferd_backend_vllm import quiet, sockets
from inferd_backend_vllm.logs import model_logs
from inferd_backend_vllm.metrics import VLLM_METRICS, stat_logger_for
from inferd_backend_vllm.options import VllmOptions
from inferd_backend_vllm.sampling import pooling_params, sampling_params
from inferd_backend_vllm.tensors import (
    GenerateInputs,
    bytes_tensor,
    decode_inputs,
    decode_pooling_inputs,
    logprobs_json,
    number_tensor,
)

log = logging.getLogger("inferd.contracts.backend.vllm")
Sender = Callable[[InferResponse | InferdError | None, bool], None]


class Engine:
    """One ``AsyncLLM`` whose requests run as tasks on ``loop`` (the server's).

    ``pooling``: the engine runs vLLM's pooling runner (``"runner": "pooling"``): requests are
    embedded, not generated. ``loras``: the LoRA adapters a request may name (``lora_name``), by
    name (``multi_lora.json``)."""

    def __init__(self, options: VllmOptions, model_name: str, version: str, loop: asyncio.AbstractEventLoop) -> None:
        self.model_name, self.version = model_name, version
        self.loop = loop
        self.pooling = options.pooling
        # Ids from 1 in the file's order, as Triton's vLLM backend numbers them.
        self.loras = {name: LoRARequest(name, i, path) for i, (name, path) in enumerate(options.loras.items(), 1)}
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        #: This engine's vllm:* metrics (see :mod:`inferd_backend_vllm.metrics`).
        self.metrics = CollectorRegistry(auto_describe=True)
        # Blocking (it starts the engine process): called on the load's worker thread, where no
        # loop runs, so vLLM starts its output handler lazily, on the loop of the first generate.
        #: Where vLLM binds this engine's sockets (see :mod:`inferd_backend_vllm.sockets`).
        self.sockets = sockets.engine_directory()
        environ = {sockets.VARIABLE: str(self.sockets)} if self.sockets is not None else {}
        try:
            with model_logs(model_name, spawns=True, environ=environ, directory=self.sockets):
                self.engine = AsyncLLM.from_engine_args(
                    AsyncEngineArgs(**options.engine_args), stat_loggers=[stat_logger_for(self.metrics)]
                )
        except BaseException:
            sockets.remove(self.sockets)
            raise
        VLLM_METRICS.add(self.metrics)
        if self.sockets is not None and logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            quiet.explain_once()
        self.max_model_len: int = self.engine.model_config.max_model_len

    def submit(self, request: InferRequest) -> None:
        """Decode ``request`` and hand it to the engine; its responses go to its sender.

        Called on the loop (the instance's ``execute``)."""
        sender = request.response_sender
        assert sender is not None, "the vLLM backend is decoupled: the data plane sets a sender"
        try:
            if self.pooling:
                inputs = decode_pooling_inputs(request)
                lora = self._lora(inputs.sampling)
                embedding = pooling_params(inputs.sampling, inputs.sampling_from_tensor)
                job = self._embed(request, inputs, embedding, lora, sender)
            else:
                inputs = decode_inputs(request)
                lora = self._lora(inputs.sampling)
                params = sampling_params(inputs.sampling, inputs.sampling_from_tensor, inputs.stream)
                self._check_limits(params.max_tokens)
                job = self._generate(request, inputs, params, lora, sender)
        except InferdError as exc:
            sender(exc, True)
            return
        task = self.loop.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _check_limits(self, max_tokens: int | None) -> None:
        """``max_tokens`` beyond the context is refused as ``vllm serve`` refuses it (its words)."""
        try:
            TokenizeParams(
                max_total_tokens=self.max_model_len,
                max_output_tokens=max_tokens or 0,
                max_total_tokens_param="max_model_len",
                max_output_tokens_param="max_tokens",
            )
        except VLLMClientError as exc:
            raise InvalidArgument(str(exc)) from None

    def _lora(self, values: dict[str, Any]) -> LoRARequest | None:
        """The adapter ``lora_name`` names (taken out of ``values``), as Triton's vLLM backend reads it."""
        name = values.pop("lora_name", None)
        if name is None:
            return None
        if not self.loras:
            raise InvalidArgument(
                f"LoRA feature is not enabled.; model '{self.model_name}' has no LoRA adapters "
                "('enable_lora' and multi_lora.json beside model.json)"
            )
        lora = self.loras.get(name) if isinstance(name, str) else None
        if lora is None:
            raise InvalidArgument(
                f"LoRA {name} is not supported, we currently support {list(self.loras)}; "
                f"model '{self.model_name}': 'lora_name' must name an adapter of its multi_lora.json"
            )
        return lora

    async def _embed(
        self, request: InferRequest, inputs: GenerateInputs, params: Any, lora: LoRARequest | None, sender: Sender
    ) -> None:
        request_id = f"{request.id or 'req'}-{uuid.uuid4().hex}"
        last: PoolingRequestOutput | None = None
        try:
            async for out in self.engine.encode(inputs.prompt, params, request_id, lora_request=lora):
                last = out
            if last is None:
                raise InternalError(f"model '{self.model_name}': the engine returned no embedding")
            vector = last.outputs.data.to(dtype=torch.float32).numpy().reshape(-1)
            tensors = [InferTensor("embedding", "FP32", (vector.size,), vector)]
            if "num_input_tokens" in inputs.extras:
                tensors.append(number_tensor("num_input_tokens", [len(last.prompt_token_ids)], np.uint32, "UINT32"))
            sender(InferResponse(self.model_name, self.version, request.id, tensors), True)
        except asyncio.CancelledError:
            sender(Unavailable(f"model '{self.model_name}' version {self.version} was unloaded"), True)
            raise
        except InferdError as exc:
            sender(exc, True)
        except (ValueError, TypeError, VLLMClientError) as exc:  # vLLM's checks of the request (dimensions...)
            sender(InvalidArgument(f"model '{self.model_name}': {exc}"), True)
        except Exception as exc:
            log.exception("model '%s': embedding failed", self.model_name)
            sender(InternalError(f"Error embedding: {exc}"), True)

    async def _generate(
        self, request: InferRequest, inputs: GenerateInputs, params: Any, lora: LoRARequest | None, sender: Sender
    ) -> None:
        request_id = f"{request.id or 'req'}-{uuid.uuid4().hex}"
        outputs = ResponseBuilder(self.model_name, self.version, request.id, inputs)
        last: RequestOutput | None = None
        prompt: Any = inputs.prompt if inputs.token_ids is None else TokensPrompt(prompt_token_ids=inputs.token_ids)
        try:
            async for out in self.engine.generate(prompt, params, request_id, lora_request=lora):
                if request.cancelled:
                    await self.engine.abort(request_id)
                    log.debug("model '%s': request %s cancelled, aborted in the engine", self.model_name, request_id)
                    sender(Cancelled("Request was cancelled"), True)
                    return
                last = out
                if inputs.stream:
                    sender(outputs.response(out), out.finished)
            if not inputs.stream and last is not None:
                sender(outputs.response(last), True)
        except asyncio.CancelledError:  # the model unloads under the request
            sender(Unavailable(f"model '{self.model_name}' version {self.version} was unloaded"), True)
            raise
        except VLLMClientError as exc:  # the request's fault (a prompt beyond the context): a 400, as vLLM's
            sender(InvalidArgument(str(exc)), True)
        except Exception as exc:
            log.exception("model '%s': generation failed", self.model_name)
            sender(InternalError(f"Error generating stream: {exc}"), True)

    def shutdown(self) -> None:
        """End the requests still generating, then stop the engine and its process (blocking:
        called on a worker thread while the loop runs), and remove its socket files.

        ``AsyncLLM.__del__`` shuts the engine down again; left to the interpreter's exit, it runs
        once vLLM's module globals are gone and prints a traceback. The engine is stopped here,
        explicitly, and its second shutdown made a no-op."""
        VLLM_METRICS.discard(self.metrics)
        if not self.loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._end_requests(), self.loop).result()
        with model_logs(self.model_name):
            self.engine.shutdown()
        self.engine.shutdown = _already_shut_down  # type: ignore[method-assign]
        sockets.remove(self.sockets)

    async def _end_requests(self) -> None:
        """Cancel the requests still generating, then vLLM's output handler (``AsyncLLM.output_handler``,
        a task on this loop): ``AsyncLLM.shutdown`` cancels it only after the engine's process has
        stopped, and while this thread waits for that (up to vLLM's 5 s), the handler, running on the
        loop, saw the engine go away and logged ``AsyncLLM output_handler failed`` with a traceback."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        handler = getattr(self.engine, "output_handler", None)
        if handler is not None:
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)


def _already_shut_down(timeout: float | None = None) -> None:
    """What ``AsyncLLM.shutdown`` does once :meth:`Engine.shutdown` stopped the engine: nothing."""


class ResponseBuilder:
    """The responses of one request: ``text_output`` and the extra outputs it asked for."""

    def __init__(self, model_name: str, version: str, request_id: str, inputs: GenerateInputs) -> None:
        self.model_name, self.version, self.request_id = model_name, version, request_id
        self.inputs = inputs

    def response(self, out: RequestOutput) -> InferResponse:
        """One response from an engine output (a delta when streaming, else the whole text)."""
        prefix = (out.prompt or "") if self.inputs.prepend_input else ""
        tensors = [bytes_tensor("text_output", [prefix + c.text for c in out.outputs])]
        extras = self.inputs.extras
        if extras:
            tensors.extend(self._extras(out, extras))
        return InferResponse(self.model_name, self.version, self.request_id, tensors)

    @staticmethod
    def _extras(out: RequestOutput, extras: frozenset[str]) -> list[InferTensor]:
        tensors: list[InferTensor] = []
        if "finish_reason" in extras:
            tensors.append(bytes_tensor("finish_reason", [str(c.finish_reason) for c in out.outputs]))
        if "cumulative_logprob" in extras:
            values = [np.nan if c.cumulative_logprob is None else c.cumulative_logprob for c in out.outputs]
            tensors.append(number_tensor("cumulative_logprob", values, np.float32, "FP32"))
        if "logprobs" in extras:
            tensors.append(bytes_tensor("logprobs", [logprobs_json(c.logprobs) for c in out.outputs]))
        if "num_input_tokens" in extras:
            tensors.append(number_tensor("num_input_tokens", [len(out.prompt_token_ids or ())], np.uint32, "UINT32"))
        if "num_output_tokens" in extras:
            tensors.append(
                number_tensor("num_output_tokens", [len(c.token_ids) for c in out.outputs], np.uint32, "UINT32")
            )
        return tensors
