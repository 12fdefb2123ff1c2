"""The routes (:data:`ROUTES`): ``/v1/models``, ``/v1/models/{model}``, ``/v1/completions``,
``/v1/chat/completions``, ``/v1/embeddings``, vLLM's ``/tokenize`` and ``/detokenize``, Triton's model
management (``POST /v1/models/{model}/load`` and ``/unload``), ``/health`` (200 once the server is ready,
503 before and while it drains: what KServe's LLMInferenceService probes) and ``/metrics`` (the
metrics port's scrape, where routers that read a model server's metrics on its API port look: the
endpoint picker, production-stack)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from inferd.api import (
    CURRENT,
    STATUS_PAGE,
    STATUS_PLOT_HEADERS,
    TOO_DEEP,
    AccessControl,
    ApiGroup,
    InferdError,
    depth_problem,
    status_plot,
    status_view,
)
from inferd_frontend_openai import embeddings, engine, extra_fields, management, params
from inferd_frontend_openai.catalog import Catalog
from inferd_frontend_openai.choices import ChoiceRunner, Event
from inferd_frontend_openai.engine import StreamingDataPlane
from inferd_frontend_openai.errors import OpenAIError, bad_request, from_inferd
from inferd_frontend_openai.metrics import LlmMetrics
from inferd_frontend_openai.responses import DONE, Reply, sse
from inferd_frontend_openai.tokenizer import TemplateError, Tokenizer, ToolStream

if TYPE_CHECKING:
    from inferd.api import DataPlane, ServedModel

log = logging.getLogger(__name__)

#: Every route: path, method, :class:`OpenAIApp` method, and the API group the access rules admit
#: it as (:class:`~inferd_frontend_openai.access.Guarded`: the HTTP port's rules).
ROUTES: tuple[tuple[str, str, str, ApiGroup], ...] = (
    ("/v1/models", "GET", "models", ApiGroup.METADATA),
    ("/v1/models/{model}/load", "POST", "load", ApiGroup.MODEL_REPOSITORY),
    ("/v1/models/{model}/unload", "POST", "unload", ApiGroup.MODEL_REPOSITORY),
    ("/v1/models/{model:path}", "GET", "model", ApiGroup.METADATA),
    ("/v1/completions", "POST", "completions", ApiGroup.INFERENCE),
    ("/v1/chat/completions", "POST", "chat_completions", ApiGroup.INFERENCE),
    ("/v1/embeddings", "POST", "embeddings", ApiGroup.INFERENCE),
    ("/tokenize", "POST", "tokenize", ApiGroup.INFERENCE),
    ("/detokenize", "POST", "detokenize", ApiGroup.INFERENCE),
    ("/health", "GET", "health", ApiGroup.HEALTH),
    ("/metrics", "GET", "prometheus", ApiGroup.STATISTICS),
)
#: The status page and its JSON, served where the HTTP port is off, admitted as the HTTP port
#: admits them (the model-repository group, as the repository index).
STATUS_ROUTES: tuple[tuple[str, str, str, ApiGroup], ...] = (
    ("/", "GET", "status_page", ApiGroup.MODEL_REPOSITORY),
    ("/v2/status", "GET", "status", ApiGroup.MODEL_REPOSITORY),
    ("/v2/status/plots/{name}", "GET", "status_plot", ApiGroup.MODEL_REPOSITORY),
)


class OpenAIApp:
    """The ASGI application over one data plane."""

    def __init__(
        self,
        dataplane: StreamingDataPlane,
        catalog: Catalog,
        metrics: LlmMetrics | None = None,
        access: AccessControl | None = None,
        status: DataPlane | None = None,
        default_max_tokens: int | None = None,
    ) -> None:
        """``access``: the server's access rules, whose tenants' usage this API meters (None: no rules);
        ``status``: serve :data:`STATUS_ROUTES` too, showing this data plane (the whole one);
        ``default_max_tokens``: a request's ``max_tokens`` when it sets none (None: as ``vllm serve``,
        a chat gets the rest of a vLLM model's context; see :meth:`_default_max_tokens`)."""
        self.default_max_tokens = default_max_tokens
        self.dataplane = dataplane
        self.access = access
        self.catalog = catalog
        self.metrics = metrics
        self.status_plane = status
        #: The metrics frontend's scrape (``accept`` -> body, content type), set once the server
        #: started (the plugin's ``inferd_startup``); None: no metrics frontend, ``/metrics`` is 404.
        self.scrape: Callable[[str], Awaitable[tuple[bytes, str]]] | None = None
        self.management = management.Management(dataplane, catalog)
        served = ROUTES if status is None else ROUTES + STATUS_ROUTES
        routes = [Route(path, getattr(self, name), methods=[method]) for path, method, name, _ in served]
        self.app = Starlette(
            routes=routes, exception_handlers={OpenAIError: _error, 404: _not_found, 405: _not_allowed}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    async def status_page(self, request: Request) -> Response:
        return Response(STATUS_PAGE, media_type="text/html; charset=utf-8", headers={"cache-control": "no-cache"})

    async def status(self, request: Request) -> Response:
        assert self.status_plane is not None  # the route exists only with it
        return JSONResponse(await status_view(self.status_plane, dict(request.headers.items())))

    async def status_plot(self, request: Request) -> Response:
        assert self.status_plane is not None  # the route exists only with it
        try:
            body, kind = await status_plot(self.status_plane, request.path_params["name"])
        except InferdError as exc:
            raise from_inferd(exc) from None
        return Response(body, media_type=kind, headers=STATUS_PLOT_HEADERS)

    async def health(self, request: Request) -> Response:
        """200 when the server is ready (every model loaded, not draining), else 503; no body, as vLLM's."""
        return Response(status_code=200 if await self.dataplane.is_ready() else 503)

    async def prometheus(self, request: Request) -> Response:
        """The metrics port's ``/metrics`` (with ``--workers N`` every worker's counters)."""
        if self.scrape is None:
            raise OpenAIError(
                404, "no metrics here: the server runs without its metrics frontend", "invalid_request_error"
            )
        body, content_type = await self.scrape(request.headers.get("accept", ""))
        return Response(body, 200, headers={"content-type": content_type})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self.catalog.listed()})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        await self.catalog.loaded(name)
        mv, lora = self.catalog.resolve(name)
        return JSONResponse(self.catalog.entry(lora or mv.name))

    async def load(self, request: Request) -> Response:
        """Triton's ``POST /v1/models/{model}/load`` (explicit model control): the model's entry once ready."""
        return JSONResponse(await self.management.load(request.path_params["model"]))

    async def unload(self, request: Request) -> Response:
        """Triton's ``POST /v1/models/{model}/unload``: ``{"status": "success", "model"}`` once unloaded."""
        name = request.path_params["model"]
        await self.management.unload(name)
        return JSONResponse({"status": "success", "model": name})

    async def completions(self, request: Request) -> Response:
        body = await _body(request)
        gen = params.decode(body, params.completion_prompts(body), chat=False)
        await self.catalog.loaded(gen.model)
        mv = self.catalog.version(gen.model)
        if any(ids is not None for ids in gen.prompt_ids):
            if not engine.takes_ids(mv.info):
                raise bad_request(
                    f"model '{gen.model}' takes no token ids: it has no 'input_ids' INT64 input "
                    "(the vLLM backend's); send text",
                    "prompt",
                )
            tokenizer = await self.catalog.tokenizer(mv)
            gen.prompts = [
                tokenizer.decode(ids) if ids is not None else text
                for text, ids in zip(gen.prompts, gen.prompt_ids, strict=True)
            ]
        return await self._generate(gen, mv, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        body = await _body(request)
        messages = params.chat_messages(body)
        options = params.chat_options(body)
        gen = params.decode(body, [], chat=True)
        await self.catalog.loaded(gen.model)
        mv = self.catalog.version(gen.model)
        tokenizer = await self.catalog.tokenizer(mv)
        wanted = params.wants_structure(body)
        if wanted is not None:
            if tokenizer.engine is None:
                raise bad_request(
                    f"model '{gen.model}' does not serve '{wanted}': it has no structured-output "
                    "backend (models of the vLLM backend do)",
                    wanted,
                )
            try:
                gen.tool = tokenizer.engine.tool_request(body, tokenizer.tool_call_parser)
            except ValueError as exc:  # the backend's BadRequest, naming the field
                raise bad_request(f"model '{gen.model}': {exc}", getattr(exc, "param", None) or wanted) from None
            options.tools = gen.tool.tools
            if gen.tool.structured_outputs:
                gen.sampling["structured_outputs"] = gen.tool.structured_outputs
        try:
            prompt = tokenizer.render(messages, options)
        except TemplateError as exc:
            raise bad_request(f"model '{gen.model}': {exc}", "messages") from None
        gen.prompts = [prompt]
        # vLLM's tokens for the rendered prompt (no special tokens added), as vllm serve sends them
        gen.prompt_ids = [
            tokenizer.encode(prompt) if tokenizer.engine is not None and engine.takes_ids(mv.info) else None
        ]
        return await self._generate(gen, mv, chat=True)

    async def embeddings(self, request: Request) -> Response:
        emb = embeddings.decode(await _body(request))
        await self.catalog.loaded(emb.model)
        mv, lora = self.catalog.resolve(emb.model)
        if not embeddings.is_embedding_model(mv.info):
            raise bad_request(
                f"model '{emb.model}' does not serve embeddings: it generates text; serve an embedding "
                'model with vLLM\'s pooling runner ("runner": "pooling" in its model.json)',
                "model",
            )
        return JSONResponse(await embeddings.run(self.dataplane, mv.info, emb, lora))

    async def tokenize(self, request: Request) -> Response:
        """vLLM's ``/tokenize``: a ``prompt`` or chat ``messages`` as token ids."""
        body = await _body(request)
        gen_model = params.decode({"model": body.get("model")}, [], chat=False).model
        await self.catalog.loaded(gen_model)
        mv = self.catalog.version(gen_model)
        tokenizer = await self.catalog.tokenizer(mv)
        special = body.get("add_special_tokens")
        if "messages" in body:
            messages = params.chat_messages(body)
            try:
                text = tokenizer.render(messages, params.chat_options(body))
            except TemplateError as exc:
                raise bad_request(f"model '{gen_model}': {exc}", "messages") from None
            ids = tokenizer.encode(text, bool(special) if special is not None else False)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise bad_request("'prompt' must be a string", "prompt")
            ids = tokenizer.encode(prompt, special if isinstance(special, bool) else True)
        answer: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": tokenizer.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }
        if body.get("return_token_strs"):
            answer["token_strs"] = tokenizer.hf.convert_ids_to_tokens(ids)
        return JSONResponse(answer)

    async def detokenize(self, request: Request) -> Response:
        """vLLM's ``/detokenize``: token ids as text."""
        body = await _body(request)
        model = params.decode({"model": body.get("model")}, [], chat=False).model
        await self.catalog.loaded(model)
        tokenizer = await self.catalog.tokenizer(self.catalog.version(model))
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not all(params.is_id(t) for t in tokens):
            raise bad_request("'tokens' must be an array of token ids (non-negative integers)", "tokens")
        return JSONResponse({"prompt": tokenizer.decode(tokens)})

    async def _generate(self, gen: params.Generation, mv: ServedModel, chat: bool) -> Response:
        started = time.monotonic()
        if not engine.is_text_model(mv.info):
            raise bad_request(
                f"model '{gen.model}' is an embedding model: it serves /v1/embeddings, not "
                f"{'chat completions' if chat else 'completions'}",
                "model",
            )
        if gen.model != mv.name:  # maybe a LoRA adapter of mv (a model's own name resolves to itself)
            lora = self.catalog.resolve(gen.model)[1]
            if lora is not None:
                gen.sampling["lora_name"] = lora  # Triton's vLLM backend's parameter
        if gen.vllm:
            _add_vllm_sampling(gen, mv)
        if gen.logprobs is not None and not engine.gives_logprobs(mv.info):
            raise bad_request(
                f"model '{gen.model}' does not give logprobs: it has no 'return_logprobs' input and "
                f"'logprobs' output (Triton's vLLM backend's)",
                "logprobs",
            )
        own_id = ("chatcmpl-" if chat else "cmpl-") + gen.request_id if gen.request_id else ""
        reply = Reply(gen.model, chat, gen.logprobs is not None, own_id)
        tokenizer = await self.catalog.tokenizer(mv)
        if gen.max_tokens is None:
            self._default_max_tokens(gen, mv, tokenizer, chat)
        grant = CURRENT.get()
        tenant = grant.tenant if grant is not None else None
        if tenant is not None and tenant.max_prompt_tokens is not None:
            _check_prompt(gen, tokenizer.count, tenant.name, tenant.max_prompt_tokens, chat)
        runner = ChoiceRunner(self.dataplane, mv.info, gen, tokenizer, self.metrics, reply.id)
        access = self.access if tenant is not None else None

        def meter(ok: bool) -> None:
            """Count the request and its usage for its tenant (``inferd.auth.usage``)."""
            if access is not None and tenant is not None:
                usage = runner.usage()
                prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
                access.usage.record(tenant, mv.info.name, prompt, completion, ok, time.monotonic() - started)

        events = runner.events()
        if not gen.stream:
            try:
                async for event in events:
                    if event.error is not None:
                        meter(False)
                        raise from_inferd(event.error)
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            meter(True)
            prefix = {c.index: c.prompt for c in runner.choices} if gen.echo and not chat else {}
            usage = runner.usage()
            # the counts in a header too, for billing that reads headers (docs/traffic.md)
            used = f"prompt={usage['prompt_tokens']}, completion={usage['completion_tokens']}"
            return JSONResponse(reply.whole(runner.choices, usage, prefix), headers={"x-tokens-used": used})
        first = await anext(events)
        if first.error is not None and len(runner.choices) == 1:
            await events.aclose()  # type: ignore[attr-defined]
            meter(False)
            raise from_inferd(first.error)
        return StreamingResponse(_sse(reply, runner, first, events, meter), media_type="text/event-stream")

    def _default_max_tokens(self, gen: params.Generation, mv: ServedModel, tokenizer: Tokenizer, chat: bool) -> None:
        """``max_tokens`` for a request that sets none: ``--default-max-tokens`` (for a vLLM model at
        most the rest of its context), else as ``vllm serve`` gives it: a chat gets the rest of
        the context, ``max_model_len`` minus its prompt's tokens, rather than ``SamplingParams``'
        16; a completion keeps 16 (vLLM's ``CompletionRequest`` default, null included, and
        OpenAI's). A vLLM model's text prompts are tokenized here for the flag (as vLLM would:
        special tokens added) and sent as ids."""
        flag = self.default_max_tokens
        chat_engine = mv.chat_engine
        if chat_engine is None:  # the model's own default, unless the flag says
            if flag is not None:
                gen.max_tokens = gen.sampling["max_tokens"] = flag
            return
        if flag is None and not chat:
            return
        sends_ids = engine.takes_ids(mv.info) and tokenizer.engine is not None  # the engine's own tokens
        limits: list[int | None] = []
        for p, (text, ids) in enumerate(zip(gen.prompts, gen.prompt_ids, strict=False)):
            if ids is None:
                ids = tokenizer.encode(text, add_special_tokens=not chat)  # a chat's template writes them
                if sends_ids:
                    gen.prompt_ids[p] = ids
            room = chat_engine.max_model_len - len(ids)
            # no room: vLLM's engine refuses the prompt, in its words
            limits.append((room if flag is None else min(room, flag)) if room > 0 else None)
        gen.prompt_max_tokens = limits


def _add_vllm_sampling(gen: params.Generation, mv: ServedModel) -> None:
    """vLLM's sampling fields into the model's ``sampling_parameters``; for a model of another
    backend, a 400 naming the first one nothing there would apply (``include_stop_str_in_output``
    is applied here, for every backend)."""
    if mv.chat_engine is not None:  # only the vLLM backend's models offer it
        gen.sampling.update(gen.vllm)
        return
    foreign = [extra_fields.request_name(k) for k in gen.vllm if k != "include_stop_str_in_output"]
    if foreign:
        name = foreign[0]
        raise bad_request(
            f"model '{gen.model}' does not take '{name}': it is a sampling field of vLLM, and "
            "only models of the vLLM backend take it; leave it out or set it to vLLM's default",
            name,
        )


def _check_prompt(gen: params.Generation, count: Callable[[str], int], tenant: str, limit: int, chat: bool) -> None:
    """A tenant's ``max_prompt_tokens``: a longer prompt is refused before it reaches the model (400:
    retrying the same prompt cannot succeed)."""
    ids = gen.prompt_ids or [None] * len(gen.prompts)
    tokens = sum(len(i) if i is not None else count(p) for p, i in zip(gen.prompts, ids, strict=False))
    if tokens > limit:
        raise OpenAIError(
            400,
            f"the prompt has {tokens} tokens, more than the {limit} tenant '{tenant}' may send "
            "in one request (its max_prompt_tokens)",
            "invalid_request_error",
            "messages" if chat else "prompt",
            "prompt_too_long",
        )


async def _sse(
    reply: Reply, runner: ChoiceRunner, first: Event, events: AsyncIterator[Event], meter: Callable[[bool], None]
) -> AsyncIterator[bytes]:
    """The chunks of a streamed response; an error after the start is an error event. The
    request is metered once its events end (or the client goes away)."""
    gen = runner.gen
    usage = gen.include_usage
    failed = False
    # with tools, each choice's text goes through the backend's streaming tool parser (vLLM's) when
    # it has one; else the text is read whole once the choice ends
    open_stream: Callable[[Any, list[int] | None], ToolStream | None] | None = (
        getattr(runner.tokenizer.engine, "tool_stream", None) if gen.tool_mode else None
    )
    streams: dict[int, ToolStream | None] = {}
    for choice in runner.choices:
        if reply.chat:
            yield sse(reply.chunk(choice.index, None, role=True, usage=usage))
        elif gen.echo:
            yield sse(reply.chunk(choice.index, choice.prompt, usage=usage))
    try:
        event: Event | None = first
        while event is not None:
            if event.error is not None:
                failed = True
                yield sse(from_inferd(event.error).body())
            else:
                index = event.choice.index
                if event.text and not gen.tool_mode:
                    yield sse(reply.chunk(index, event.text, usage=usage, tokens=event.tokens, offset=event.offset))
                stream = None
                if open_stream is not None:
                    if index not in streams:
                        streams[index] = open_stream(gen.tool, event.choice.prompt_ids)
                    stream = streams[index]
                if stream is not None:
                    content, calls = stream.feed(event.text, event.finished)
                    if content:
                        yield sse(reply.chunk(index, content, usage=usage))
                    if calls:
                        yield sse(reply.tool_deltas_chunk(index, calls, usage))
                elif event.finished and gen.tool_mode:
                    if event.choice.text:
                        yield sse(reply.chunk(event.choice.index, event.choice.text, usage=usage))
                    if event.choice.tool_calls:
                        yield sse(reply.tool_calls_chunk(event.choice, usage))
                if event.finished:
                    yield sse(reply.chunk(event.choice.index, None, event.choice.finish_reason, usage=usage))
            event = await anext(events, None)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
        meter(not failed)
    if usage:
        yield sse(reply.usage_chunk(runner.usage()))
    yield DONE


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except RecursionError:
        raise bad_request(f"We could not parse the JSON body of your request: {TOO_DEEP}") from None
    except ValueError as exc:
        raise bad_request(f"We could not parse the JSON body of your request: {exc}") from None
    problem = depth_problem(raw, body)
    if problem:
        raise bad_request(f"We could not parse the JSON body of your request: {problem}")
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


async def _error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OpenAIError)
    return Response(exc.json(), exc.status, media_type="application/json")


async def _not_found(request: Request, exc: Exception) -> Response:
    error = OpenAIError(404, f"Invalid URL ({request.method} {request.url.path})", "invalid_request_error")
    return Response(error.json(), 404, media_type="application/json")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    rest = request.url.path.removeprefix("/v1/models/")
    if rest != request.url.path and "/" in rest:  # no route takes it (a model name has no '/'), as Triton's 404
        return await _not_found(request, exc)
    error = OpenAIError(405, f"Method {request.method} is not allowed on {request.url.path}", "invalid_request_error")
    return Response(error.json(), 405, media_type="application/json")
