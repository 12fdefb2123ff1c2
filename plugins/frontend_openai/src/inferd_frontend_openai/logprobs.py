"""Token log-probabilities: Triton's vLLM ``logprobs`` output as OpenAI's ``logprobs`` objects.

The model's ``logprobs`` output (asked for with ``return_logprobs``) is JSON: one object per
generated token, ``{token_id: {"logprob", "rank", "decoded_token"}}``, the sampled token first
(as vLLM lists them), then the top candidates by rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability, and the ``top`` candidates ``(token, logprob)``."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = field(default=())


def parse(text: str, top: int) -> list[TokenLogprob]:
    """The tokens of one response's ``logprobs`` output, each with up to ``top`` candidates."""
    steps = json.loads(text)
    if not isinstance(steps, list):
        return []
    out = []
    for step in steps:
        if not isinstance(step, dict) or not step:
            continue
        entries = [e for e in step.values() if isinstance(e, dict)]
        sampled = entries[0]
        ranked = sorted(entries, key=lambda e: e.get("rank") or 0)[:top] if top else []
        out.append(
            TokenLogprob(
                _token(sampled),
                float(sampled.get("logprob", 0.0)),
                tuple((_token(e), float(e.get("logprob", 0.0))) for e in ranked),
            )
        )
    return out


def _token(entry: dict[str, Any]) -> str:
    value = entry.get("decoded_token")
    return value if isinstance(value, str) else ""


def chat(tokens: list[TokenLogprob]) -> dict[str, Any]:
    """A chat choice's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""

    def one(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**one(t.token, t.logprob), "top_logprobs": [one(*c) for c in t.top]} for t in tokens]}


def completion(tokens: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """A text completion's legacy ``logprobs`` (``text_offset`` counted from ``offset``)."""
    offsets, at = [], offset
    for t in tokens:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top) for t in tokens],
        "text_offset": offsets,
    }
