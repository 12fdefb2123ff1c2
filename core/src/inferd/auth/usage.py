"""Token metering per tenant and model (docs/traffic.md, "Token metering").

With ``--auth-config``, every inference request a frontend sends through the data plane
(``infer``/``stream``: KServe HTTP and gRPC, generate, the OpenAI API) is counted once per tenant
and model when it ends: a success or a failure, and the tokens its responses report. A model
reports tokens as response parameters ``prompt_tokens`` and ``completion_tokens`` (any backend:
a Python model passes ``parameters=`` to its ``InferenceResponse``), or as Triton's vLLM outputs
``num_input_tokens`` / ``num_output_tokens``; over a stream, the prompt count is the largest one
reported and completion counts add up (each response reports the tokens it adds). A frontend
that counts tokens itself (the OpenAI frontend, from its tokenizer) marks the request with
:data:`METERED` in ``request.context`` and calls :meth:`Usage.record`.

Everything runs on the event loop: one dict lookup per request, no locks.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.metrics_core import Metric

from inferd.auth.keys import Tenant
from inferd.auth.limits import TenantLimits
from inferd.auth.policy import CURRENT
from inferd.contracts.errors import InferdError

if TYPE_CHECKING:
    from inferd.contracts.model_info import Infer, ModelInfo, Stream
    from inferd.contracts.types import InferRequest, InferResponse

#: ``request.context`` key: the frontend meters this request itself (:meth:`Usage.record`).
METERED = "inferd.metered"
#: The response parameters a model reports its token counts in.
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"
#: Triton's vLLM backend's outputs, read when the parameters are absent.
_OUTPUTS = ("num_input_tokens", "num_output_tokens")
TOKENS = "inferd_tenant_tokens_total"
REQUESTS = "inferd_tenant_model_requests_total"
LATENCY = "inferd_tenant_request_latency_seconds"
#: The latency histogram's upper bounds (seconds; the last is +Inf).
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    float("inf"),
)


class Meterable(Protocol):
    """What :meth:`Usage.metered` wraps: the router's entry points (a protocol, so that ``auth``
    does not import the router)."""

    async def infer(self, request: InferRequest, model: ModelInfo | None = None) -> InferResponse: ...

    def stream(
        self, request: InferRequest, model: ModelInfo | None = None
    ) -> AsyncIterator[InferResponse | InferdError]: ...

    def resolve(self, name: str, version: str = "") -> ModelInfo: ...


@dataclass(slots=True)
class Tally:
    """One tenant's use of one model."""

    success: int = 0
    failure: int = 0
    prompt: int = 0
    completion: int = 0


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def reported(response: InferResponse) -> tuple[int, int]:
    """The (prompt, completion) tokens ``response`` reports; (0, 0) when it reports none."""
    params = response.parameters
    if PROMPT_TOKENS in params or COMPLETION_TOKENS in params:
        return _count(params.get(PROMPT_TOKENS)), _count(params.get(COMPLETION_TOKENS))
    if not response.outputs:
        return 0, 0
    counts = [0, 0]
    for i, name in enumerate(_OUTPUTS):
        tensor = response.output(name)
        if tensor is not None and tensor.data.size:
            counts[i] = max(0, int(tensor.data.sum()))
    if counts[0] or counts[1]:  # the counts travel as parameters too, whatever outputs were asked for
        params[PROMPT_TOKENS], params[COMPLETION_TOKENS] = counts[0], counts[1]
    return counts[0], counts[1]


class Usage:
    """Every tenant's tallies by model, spent from their ``tokens_per_minute`` budgets too."""

    def __init__(self, limits: TenantLimits) -> None:
        self.limits = limits
        self.tallies: dict[tuple[str, str], Tally] = {}
        #: Latency by (tenant, model, priority): bucket counts (not cumulative) and their sum.
        self.latencies: dict[tuple[str, str, str], tuple[list[int], list[float]]] = {}

    def record(
        self, tenant: Tenant, model: str, prompt: int, completion: int, ok: bool, seconds: float | None = None
    ) -> None:
        """One finished request of ``tenant`` to ``model``; ``seconds``: its latency, from its
        arrival at the frontend to its (last) answer (None: not measured)."""
        if seconds is not None:
            self.observe(tenant, model, seconds)
        tally = self.tallies.get((tenant.name, model))
        if tally is None:
            tally = self.tallies[tenant.name, model] = Tally()
        if ok:
            tally.success += 1
        else:
            tally.failure += 1
        tally.prompt += prompt
        tally.completion += completion
        if tenant.tokens_per_minute is not None and prompt + completion:
            self.limits.spend(tenant, prompt + completion)

    def observe(self, tenant: Tenant, model: str, seconds: float) -> None:
        """One request's latency in ``inferd_tenant_request_latency_seconds{tenant,model,priority}``."""
        key = (tenant.name, model, "none" if tenant.priority is None else str(tenant.priority))
        entry = self.latencies.get(key)
        if entry is None:
            entry = self.latencies[key] = ([0] * len(LATENCY_BUCKETS), [0.0])
        entry[0][bisect_left(LATENCY_BUCKETS, seconds)] += 1
        entry[1][0] += seconds

    def collect(self) -> Iterator[Metric]:
        """``inferd_tenant_tokens_total{tenant,model,kind}``,
        ``inferd_tenant_model_requests_total{tenant,model,outcome}`` and (once a request was
        timed) ``inferd_tenant_request_latency_seconds{tenant,model,priority}``."""
        tokens = Metric(TOKENS, "Tokens by tenant, model and kind (prompt, completion)", "counter")
        requests = Metric(REQUESTS, "Inference requests by tenant, model and outcome (success, failure)", "counter")
        for (tenant, model), tally in sorted(self.tallies.items()):
            tokens.add_sample(TOKENS, {"tenant": tenant, "model": model, "kind": "prompt"}, tally.prompt)
            tokens.add_sample(TOKENS, {"tenant": tenant, "model": model, "kind": "completion"}, tally.completion)
            requests.add_sample(REQUESTS, {"tenant": tenant, "model": model, "outcome": "success"}, tally.success)
            requests.add_sample(REQUESTS, {"tenant": tenant, "model": model, "outcome": "failure"}, tally.failure)
        yield tokens
        yield requests
        if self.latencies:
            yield self._latency_family()

    def _latency_family(self) -> Metric:
        family = Metric(
            LATENCY, "Inference request latency by tenant, model and tenant priority (seconds)", "histogram"
        )
        for (tenant, model, priority), (counts, total) in sorted(self.latencies.items()):
            labels = {"tenant": tenant, "model": model, "priority": priority}
            seen = 0
            for bound, count in zip(LATENCY_BUCKETS, counts, strict=True):
                seen += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                family.add_sample(LATENCY + "_bucket", {**labels, "le": le}, seen)
            family.add_sample(LATENCY + "_count", labels, seen)
            family.add_sample(LATENCY + "_sum", labels, total[0])
        return family

    def metered(self, router: Meterable) -> tuple[Infer, Stream]:
        """``router``'s ``infer`` and ``stream``, counting the requests: the data plane's (what
        frontends send; ensemble steps and models calling models go to the router directly: not
        counted)."""
        infer, stream, resolve = router.infer, router.stream, router.resolve
        record = self.record

        async def metered_infer(request: InferRequest, model: ModelInfo | None = None) -> InferResponse:
            grant = CURRENT.get()
            tenant = grant.tenant if grant is not None else None
            if tenant is None:
                return await infer(request, model)
            if model is None:  # an unknown model fails here, uncounted: the series stay the served models'
                model = resolve(request.model_name, request.model_version)
            name = model.name
            try:
                response = await infer(request, model)
            except BaseException:
                record(tenant, name, 0, 0, False, (time.monotonic_ns() - request.arrival_ns) / 1e9)
                raise
            prompt, completion = reported(response)
            record(tenant, name, prompt, completion, True, (time.monotonic_ns() - request.arrival_ns) / 1e9)
            return response

        def metered_stream(
            request: InferRequest, model: ModelInfo | None = None
        ) -> AsyncIterator[InferResponse | InferdError]:
            grant = CURRENT.get()
            tenant = grant.tenant if grant is not None else None
            if tenant is None or METERED in request.context:
                return stream(request, model)  # no layer in between
            if model is None:
                model = resolve(request.model_name, request.model_version)
            return counted(tenant, model, stream(request, model), request.arrival_ns)

        async def counted(
            tenant: Tenant, model: ModelInfo, inner: AsyncIterator[InferResponse | InferdError], arrival_ns: int
        ) -> AsyncIterator[InferResponse | InferdError]:
            prompt = completion = 0
            failed = False
            try:
                async for item in inner:
                    if isinstance(item, InferdError):
                        failed = True
                    else:
                        p, c = reported(item)
                        prompt, completion = max(prompt, p), completion + c
                    yield item
            except GeneratorExit:  # the caller stopped reading (a stop string): not a failure
                raise
            except BaseException:
                failed = True
                raise
            finally:
                await inner.aclose()  # type: ignore[attr-defined]
                record(tenant, model.name, prompt, completion, not failed, (time.monotonic_ns() - arrival_ns) / 1e9)

        return metered_infer, metered_stream


def usage_json(families: Iterator[Metric]) -> dict[str, Any]:
    """``GET /v2/usage``: ``{"tenants": {tenant: {"models": {model: {...}}, "totals": {...}}}}``
    from the metering families (summed over the workers already)."""
    tenants: dict[str, Any] = {}
    for family in families:
        if family.name not in (TOKENS, REQUESTS):
            continue
        for sample in family.samples:
            labels = sample.labels
            key = f"{labels['kind']}_tokens" if family.name == TOKENS else f"{labels['outcome']}_requests"
            entry = tenants.setdefault(labels["tenant"], {"models": {}, "totals": _empty()})
            model = entry["models"].setdefault(labels["model"], _empty())
            model[key] += int(sample.value)
            entry["totals"][key] += int(sample.value)
    return {"tenants": tenants}


def _empty() -> dict[str, int]:
    return {"success_requests": 0, "failure_requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
