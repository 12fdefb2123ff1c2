"""The choices of one request run side by side: stop strings, finish reasons and token counts.

Each choice is one inferd request (``n`` per prompt, seeds ``seed + i``). Stop strings are cut
here for every backend (a backend that applies them itself stops first); text that may be the
start of a stop string is held back until it is known not to be.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferd.api import InferdError
from inferd_frontend_openai import engine
from inferd_frontend_openai import logprobs as lp

if TYPE_CHECKING:
    from inferd.api import ModelInfo
    from inferd_frontend_openai.engine import StreamingDataPlane
    from inferd_frontend_openai.metrics import LlmMetrics
    from inferd_frontend_openai.params import Generation
    from inferd_frontend_openai.tokenizer import Tokenizer


class StopScanner:
    """Cuts a stream of text at the first stop string (after it, with ``include``: vLLM's
    ``include_stop_str_in_output``)."""

    def __init__(self, stops: list[str], include: bool = False) -> None:
        self.stops = stops
        self.include = include
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The text that can be sent now (all of it up to a stop string, once one is seen)."""
        if not self.stops:
            return text
        pending = self._pending + text
        hits = [(i, len(s)) for i, s in ((pending.find(s), s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            self._pending = ""
            start, length = min(hits)
            return pending[: start + length if self.include else start]
        cut = max(len(pending) - self._hold, 0)
        self._pending = pending[cut:]
        return pending[:cut]

    def flush(self) -> str:
        """What was held back, once the stream ended without a stop string."""
        pending, self._pending = self._pending, ""
        return pending


@dataclass
class Choice:
    """One choice: its text so far, and how it finished."""

    index: int
    prompt: str
    #: The prompt's token ids, where known (sent as the model's ``input_ids``).
    prompt_ids: list[int] | None = None
    text: str = ""
    finish_reason: str | None = None
    backend_tokens: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: When its first and its latest text came (``time.monotonic()``).
    first_at: float | None = None
    last_at: float = 0.0
    #: Its tokens' log-probabilities, when asked for.
    tokens: list[lp.TokenLogprob] = field(default_factory=list)
    #: The prompt's token count the backend reported (``num_input_tokens``).
    backend_prompt_tokens: int | None = None
    #: The tool calls read from its text (a chat with tools), OpenAI's ``tool_calls`` entries.
    tool_calls: list[dict[str, object]] = field(default_factory=list)


@dataclass
class Event:
    """New text of choice ``index`` (``finished``: its last event)."""

    choice: Choice
    text: str
    finished: bool = False
    error: InferdError | None = field(default=None)
    #: The log-probabilities of the tokens of ``text`` (when asked for), and where ``text`` starts.
    tokens: list[lp.TokenLogprob] = field(default_factory=list)
    offset: int = 0


class ChoiceRunner:
    """Runs every choice of a :class:`Generation` and yields their events as they come."""

    def __init__(
        self,
        dataplane: StreamingDataPlane,
        info: ModelInfo,
        gen: Generation,
        tokenizer: Tokenizer,
        metrics: LlmMetrics | None = None,
        request_id: str = "",
    ) -> None:
        self.arrival = time.monotonic()
        self.request_id = request_id
        self.metrics = metrics
        self.dataplane = dataplane
        self.info = info
        self.gen = gen
        self.tokenizer = tokenizer
        ids = gen.prompt_ids or [None] * len(gen.prompts)
        self.choices = [
            Choice(p * gen.n + i, prompt, ids[p]) for p, prompt in enumerate(gen.prompts) for i in range(gen.n)
        ]

    def _sampling(self, choice: Choice) -> dict[str, object]:
        sampling = dict(self.gen.sampling)
        if self.gen.prompt_max_tokens:
            default = self.gen.prompt_max_tokens[choice.index // self.gen.n]
            if default is not None:
                sampling["max_tokens"] = default
        if self.gen.seed is not None:
            sampling["seed"] = self.gen.seed + choice.index % self.gen.n
        return sampling

    async def _events(self, choice: Choice) -> AsyncIterator[Event]:
        """The events of one choice, its last one ``finished`` (an error ends it too)."""
        gen = self.gen
        request = engine.build_request(
            self.info,
            choice.prompt,
            self._sampling(choice),
            gen.stream,
            self.request_id,
            gen.logprobs is not None,
            choice.prompt_ids,
        )
        scanner = StopScanner(self.gen.stop, bool(gen.vllm.get("include_stop_str_in_output")))
        pieces = engine.run(self.dataplane, self.info, request)
        try:
            async for piece in pieces:
                text = scanner.feed(piece.text)
                offset = len(choice.text)
                choice.text += text
                tokens = (
                    lp.parse(piece.logprobs, gen.logprobs or 0) if piece.logprobs and gen.logprobs is not None else []
                )
                choice.tokens += tokens
                if piece.output_tokens is not None:
                    choice.backend_tokens = (choice.backend_tokens or 0) + piece.output_tokens
                if piece.input_tokens is not None:
                    choice.backend_prompt_tokens = piece.input_tokens
                choice.finish_reason = piece.finish_reason or choice.finish_reason
                if text:
                    choice.last_at = time.monotonic()
                    choice.first_at = choice.first_at or choice.last_at
                    yield Event(choice, text, tokens=tokens, offset=offset)
                if scanner.stopped:
                    choice.finish_reason = "stop"
                    break
        except InferdError as exc:
            yield Event(choice, "", True, exc)
            return
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]
        rest = scanner.flush()
        choice.text += rest
        self._finish(choice)
        yield Event(choice, rest, True)

    async def _pump(self, choice: Choice, queue: asyncio.Queue[Event]) -> None:
        events = self._events(choice)
        try:
            async for event in events:
                queue.put_nowait(event)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    def _finish(self, choice: Choice) -> None:
        """Token counts from the tokenizer (the backend's output count when it gives one)."""
        first = self.choices[choice.index - choice.index % self.gen.n]  # the first choice of its prompt
        choice.prompt_tokens = (
            choice.backend_prompt_tokens
            or first.prompt_tokens
            or (len(choice.prompt_ids) if choice.prompt_ids is not None else self.tokenizer.count(choice.prompt))
        )
        backend = choice.backend_tokens
        choice.completion_tokens = backend if backend is not None else self.tokenizer.count(choice.text)
        if choice.finish_reason not in ("stop", "length"):
            limit = self.gen.max_tokens
            choice.finish_reason = "length" if limit is not None and choice.completion_tokens >= limit else "stop"
        mode = self.gen.tool_mode
        if mode and self.tokenizer.engine is not None:  # vLLM's tool-call parser reads the whole text
            content, choice.tool_calls = self.tokenizer.engine.tool_calls(self.gen.tool, choice.text)
            choice.text = content or ""
            called = (mode == "auto" and choice.tool_calls) or (mode == "required" and choice.finish_reason == "stop")
            choice.finish_reason = "tool_calls" if called else choice.finish_reason
        if self.metrics is not None:
            to_first = None if choice.first_at is None else choice.first_at - self.arrival
            self.metrics.choice_done(
                self.info.name,
                str(self.info.version),
                choice.prompt_tokens,
                choice.completion_tokens,
                to_first,
                choice.last_at - self.arrival,
            )

    async def events(self) -> AsyncIterator[Event]:
        """Every choice's events; closing this iterator cancels the choices still running.

        One choice runs here, in the caller's task; several run as tasks, side by side."""
        if len(self.choices) == 1:
            events = self._events(self.choices[0])
            try:
                async for event in events:
                    yield event
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            return
        queue: asyncio.Queue[Event] = asyncio.Queue()
        tasks = [asyncio.ensure_future(self._pump(c, queue)) for c in self.choices]
        running = len(tasks)
        try:
            while running:
                event = await queue.get()
                running -= event.finished
                yield event
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage`` over every choice (each prompt counted once)."""
        prompts = {c.index // self.gen.n: c.prompt_tokens for c in self.choices}
        prompt_tokens = sum(prompts.values())
        completion = sum(c.completion_tokens for c in self.choices)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }
