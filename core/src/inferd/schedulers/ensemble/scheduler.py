"""The ensemble scheduler: runs an ensemble's steps as a dataflow graph on the event loop.

A step starts as soon as every tensor it reads exists; independent steps run concurrently as
asyncio tasks, each an ordinary in-process request to the step's model through the data plane
(tensors pass between steps as the same numpy arrays, never copied). A decoupled step forks the
rest of the graph once per response it sends; the branches that end with the ensemble's outputs
each send one response of the (then decoupled) ensemble.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from inferd.contracts.errors import InferdError, InternalError
from inferd.contracts.scheduler import Scheduler, SchedulerContext
from inferd.contracts.trace import TRACE_KEY, TRACE_PARENT_KEY
from inferd.contracts.types import InferRequest, InferResponse, InferTensor, RequestedOutput
from inferd.schedulers.ensemble.plan import Plan, Step

#: An ensemble tensor -> its value; ``None`` marks an optional ensemble input the request left out.
Env = dict[str, "InferTensor | None"]


@dataclass(slots=True)
class _Run:
    """One ensemble request in flight."""

    request: InferRequest
    wanted: list[str]
    emit: Callable[[Env], None] | None = None  # decoupled ensembles: sends one response


class EnsembleScheduler(Scheduler):
    """Triton's ensemble scheduler for ``platform: "ensemble"`` models."""

    composing = True

    def __init__(self, context: SchedulerContext) -> None:
        super().__init__(context)
        if context.models is None:
            raise InternalError(f"ensemble '{context.name}' needs the data plane to call its steps")
        self.models = context.models
        self._name = context.name
        self._version = str(context.version)
        config = context.config
        self.plan = Plan.from_config(config)
        # Triton derives the ensemble's transaction policy from its steps.
        self.decoupled = self.plan.bind(config, self.models, context.namespace)
        config.model_transaction_policy.decoupled = self.decoupled
        limit = config.ensemble_scheduling.max_inflight_requests
        self._limits = {s.index: asyncio.Semaphore(limit) for s in self.plan.steps} if limit > 0 else None
        self._requested = {s.index: [RequestedOutput(name) for name, _ in s.outputs] for s in self.plan.steps}
        self._labels = self.plan.output_labels(config, self.models)

    def output_labels(self) -> dict[str, list[str]]:
        return self._labels

    # -- the request ----------------------------------------------------------------------------

    async def schedule(self, request: InferRequest) -> InferResponse:
        wanted = request.requested_output_names() or self.plan.outputs
        env: Env = dict(request.inputs)
        for name in self.plan.optional_inputs:
            env.setdefault(name, None)
        steps = self.plan.steps_for(wanted)
        if self.decoupled and request.response_sender is not None:
            return await self._run_decoupled(_Run(request, wanted), steps, env)
        await self._drive(_Run(request, wanted), steps, env)
        return self._response(request, wanted, env)

    def _response(self, request: InferRequest, wanted: list[str], env: Env) -> InferResponse:
        outputs = []
        for name in wanted:
            tensor = env.get(name)
            if tensor is None:
                raise InternalError(f"in ensemble '{self._name}', no step produced output '{name}'")
            fix = self.plan.output_fixes.get(name) if self.plan.output_fixes else None
            if fix is not None:
                tensor = fix.apply(tensor)
            outputs.append(InferTensor(name, tensor.datatype, tensor.shape, tensor.data))
        return InferResponse(self._name, self._version, request.id, outputs)

    async def _run_decoupled(self, run: _Run, steps: list[Step], env: Env) -> InferResponse:
        """Send one response per branch that reaches the outputs, then the final flag."""
        sender = run.request.response_sender
        assert sender is not None

        def emit(branch_env: Env) -> None:
            sender(self._response(run.request, run.wanted, branch_env), False)

        run.emit = emit
        await self._branch(run, steps, env, -1)
        sender(None, True)
        return InferResponse(self._name, self._version, run.request.id)

    # -- the graph ------------------------------------------------------------------------------

    async def _branch(self, run: _Run, steps: list[Step], env: Env, origin: int) -> None:
        await self._drive(run, steps, env)
        if run.emit is not None and origin == self.plan.output_origin:
            run.emit(env)

    async def _drive(self, run: _Run, steps: list[Step], env: Env) -> None:
        """Run ``steps`` as their inputs appear in ``env``; raise the first step's error once
        the steps already running have finished."""
        pending = list(steps)
        running: dict[asyncio.Future[Any], Step] = {}
        error: InferdError | None = None
        while True:
            if error is None and pending:
                ready = [s for s in pending if s.reads.issubset(env)]
                if ready:
                    pending = [s for s in pending if s not in ready]
                    if len(ready) == 1 and not running and not ready[0].decoupled:
                        try:  # a chain: await the step directly, no task needed
                            self._merge(ready[0], await self._call(run, ready[0], env), env)
                        except InferdError as exc:
                            error = exc
                        continue
                    for step in ready:
                        coro: Coroutine[Any, Any, InferResponse | None]
                        if step.decoupled:
                            below = self.plan.downstream.get(step.index, frozenset())
                            children = [s for s in pending if s.index in below]
                            pending = [s for s in pending if s.index not in below]
                            coro = self._fan_out(run, step, env, children)
                        else:
                            coro = self._call(run, step, env)
                        running[asyncio.ensure_future(coro)] = step
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                step = running.pop(future)
                failure = future.exception()
                if failure is not None:
                    error = error or _as_inferd(failure)
                elif error is None and not step.decoupled:
                    try:
                        self._merge(step, future.result(), env)
                    except InferdError as merge_error:
                        error = merge_error
        if error is not None:
            raise error
        if pending:
            missing = sorted({t for s in pending for t in s.reads if t not in env})
            raise InternalError(
                f"in ensemble '{self._name}', {pending[0].label} never ran: no step produced "
                f"{', '.join(repr(m) for m in missing)}"
            )

    def _step_request(self, run: _Run, step: Step, env: Env) -> InferRequest:
        inputs = {}
        for name, tensor_name in step.inputs:
            tensor = env[tensor_name]
            if tensor is not None:
                inputs[name] = InferTensor(name, tensor.datatype, tensor.shape, tensor.data)
        for fix in step.fixes:
            tensor = inputs.get(fix.name)
            if tensor is not None:
                inputs[fix.name] = fix.apply(tensor)
        request = run.request
        child = InferRequest(
            step.model,
            step.version,
            request.id,
            inputs,
            list(self._requested[step.index]),
            dict(request.parameters),
        )
        trace = request.context.get(TRACE_KEY) if request.context else None
        if trace is not None:  # the step is traced as a child of the ensemble request
            child.context[TRACE_PARENT_KEY] = trace
        return child

    async def _call(self, run: _Run, step: Step, env: Env) -> InferResponse:
        request = self._step_request(run, step, env)
        models = self.models
        try:
            if self._limits is None:
                return await models.infer(request, models.resolve_key(step.key, step.version))
            async with self._limits[step.index]:
                return await models.infer(request, models.resolve_key(step.key, step.version))
        except Exception as exc:
            raise self._step_error(step, exc) from None

    async def _fan_out(self, run: _Run, step: Step, env: Env, children: list[Step]) -> None:
        """Stream a decoupled step; each response continues the graph in a branch of its own."""
        request = self._step_request(run, step, env)
        branches: list[asyncio.Future[None]] = []
        error: InferdError | None = None
        try:
            async for response in self.models.stream(request, self.models.resolve_key(step.key, step.version)):
                if isinstance(response, InferdError):
                    error = error or self._step_error(step, response)
                    continue
                branch_env = dict(env)
                self._merge(step, response, branch_env)
                branches.append(asyncio.ensure_future(self._branch(run, children, branch_env, step.index)))
        except Exception as exc:
            error = error or self._step_error(step, exc)
        results = await asyncio.gather(*branches, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                error = error or _as_inferd(result)
        if error is not None:
            raise error

    def _merge(self, step: Step, response: InferResponse, env: Env) -> None:
        produced = {t.name: t for t in response.outputs}
        for name, tensor_name in step.outputs:
            tensor = produced.get(name)
            if tensor is None:
                raise InternalError(
                    f"in ensemble '{self._name}', {step.label} returned no output '{name}' "
                    f"(mapped to ensemble tensor '{tensor_name}')"
                )
            env[tensor_name] = tensor

    def _step_error(self, step: Step, exc: BaseException) -> InferdError:
        if isinstance(exc, InferdError):
            return InferdError(f"in ensemble '{self._name}', {step.label}: {exc.message}", exc.kind)
        return InternalError(f"in ensemble '{self._name}', {step.label}: {type(exc).__name__}: {exc}")


def _as_inferd(exc: BaseException) -> InferdError:
    if isinstance(exc, InferdError):
        return exc
    return InternalError(f"{type(exc).__name__}: {exc}")
