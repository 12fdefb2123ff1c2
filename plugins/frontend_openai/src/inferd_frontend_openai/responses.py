"""OpenAI's response objects and stream chunks, for chat and text completions."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from inferd_frontend_openai import logprobs as lp
from inferd_frontend_openai.choices import Choice
from inferd_frontend_openai.logprobs import TokenLogprob

#: ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` without making an encoder per call.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + _encode(payload).encode() + b"\n\n"


#: The event that ends every OpenAI stream.
DONE = b"data: [DONE]\n\n"


@dataclass
class Reply:
    """The fields every object of one response shares; ``chat`` picks the chat shapes."""

    model: str
    chat: bool
    #: Whether choices carry ``logprobs`` objects (else ``null``).
    logprobs: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.id = self.id or ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, choices: list[Choice], usage: dict[str, int], prefix: dict[int, str]) -> dict[str, Any]:
        """The non-streamed response (``prefix``: the echoed prompt of each choice)."""
        body = self._head(chunk=False)
        body["choices"] = [self._whole_choice(c, prefix.get(c.index, "")) for c in choices]
        body["usage"] = usage
        return body

    def _whole_choice(self, choice: Choice, prefix: str) -> dict[str, Any]:
        probs = self._logprobs(choice.tokens, len(prefix))
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": choice.text}
            if choice.tool_calls:
                message["tool_calls"] = choice.tool_calls
            return {"index": choice.index, "message": message, "logprobs": probs, "finish_reason": choice.finish_reason}
        text = prefix + choice.text
        return {"index": choice.index, "text": text, "logprobs": probs, "finish_reason": choice.finish_reason}

    def _logprobs(self, tokens: list[TokenLogprob], offset: int) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        return lp.chat(tokens) if self.chat else lp.completion(tokens, offset)

    def chunk(
        self,
        index: int,
        text: str | None,
        finish_reason: str | None = None,
        *,
        role: bool = False,
        usage: bool = False,
        tokens: list[TokenLogprob] | None = None,
        offset: int = 0,
    ) -> dict[str, Any]:
        """One stream chunk for choice ``index``: new ``text`` (None: none) with its ``tokens``'
        log-probabilities (``offset``: where it starts), or its finish; ``role``: the chat's first
        chunk; ``usage``: carry ``"usage": null`` (include_usage)."""
        body = self._head(chunk=True)
        probs = self._logprobs(tokens, offset) if tokens is not None else None
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": index, "delta": delta, "logprobs": probs, "finish_reason": finish_reason}
        else:
            choice = {"index": index, "text": text or "", "logprobs": probs, "finish_reason": finish_reason}
        body["choices"] = [choice]
        if usage:
            body["usage"] = None
        return body

    def tool_calls_chunk(self, choice: Choice, usage: bool = False) -> dict[str, Any]:
        """The chunk carrying a choice's tool calls, whole, in OpenAI's delta shape (each with its ``index``)."""
        calls = [{"index": i, **call} for i, call in enumerate(choice.tool_calls)]
        body = self._head(chunk=True)
        body["choices"] = [
            {"index": choice.index, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None}
        ]
        if usage:
            body["usage"] = None
        return body

    def tool_deltas_chunk(self, index: int, calls: list[dict[str, Any]], usage: bool = False) -> dict[str, Any]:
        """A chunk carrying tool-call deltas of choice ``index`` as the backend's parser streams them
        (an id, type and name first, then ``function.arguments`` fragments)."""
        body = self._head(chunk=True)
        body["choices"] = [{"index": index, "delta": {"tool_calls": calls}, "logprobs": None, "finish_reason": None}]
        if usage:
            body["usage"] = None
        return body

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        """The last chunk with ``stream_options.include_usage``: no choices, the whole usage."""
        return {**self._head(chunk=True), "choices": [], "usage": usage}
