"""Streamed tool calls as ``vllm serve`` streams them, through vLLM's own parser (``parse_delta``):
the first ``delta.tool_calls`` entry carries the call's id and name, then several chunks carry
``function.arguments`` fragments whose concatenation is the JSON of the arguments the whole
(non-streamed) answer gives. Checked with the official ``openai`` client against ``inferd serve``
and, beside it, ``vllm serve`` on the same folder with the same Hermes parser (conftest's
:class:`SideBySide`): ``required``, a named function, and ``auto`` with a Hermes ``<tool_call>``
that a ``structured_outputs`` regex makes the random model write.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.lazy import lazy_import
from tests.plugins.backend_vllm.conftest import SKIP, SideBySide

openai = lazy_import("openai")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm_serve,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather",
        "parameters": {
            "type": "object",
            # a long argument: many engine steps, so that a busy machine (vLLM merges the outputs
            # a slow reader has not taken yet) still streams it in several pieces
            "properties": {"city": {"type": "string", "minLength": 16, "maxLength": 20}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
MESSAGES = [{"role": "user", "content": "weather in paris?"}]
#: What the random model must write for ``auto``: one Hermes tool call, the city's letters its own.
HERMES = r'<tool_call>\{"name": "get_weather", "arguments": \{"city": "[a-z]{16,20}"\}\}</tool_call>'
#: The tool for ``auto``: not strict (a strict tool would be one more constraint beside the regex).
LOOSE = {"type": "function", "function": {k: v for k, v in WEATHER["function"].items() if k != "strict"}}


def _no_whitespace(base: str) -> dict[str, int]:
    """``logit_bias`` that keeps a random model from spending its tokens on the whitespace a JSON
    grammar allows anywhere (so the constrained answer ends within ``max_tokens``)."""
    bias = {}
    for char in (" ", "\n", "\t", "\r"):
        body = {"model": "llm", "prompt": char, "add_special_tokens": False}
        for token in httpx.post(base + "/tokenize", json=body, timeout=60).json()["tokens"]:
            bias[str(token)] = -100
    return bias


@pytest.fixture(scope="module")
def clients(side_by_side: SideBySide) -> list[openai.OpenAI]:
    """``inferd serve``'s client, then ``vllm serve``'s."""
    bases = [f"http://127.0.0.1:{side_by_side.inferd.ports['openai']}", side_by_side.vllm_llm.url]
    return [openai.OpenAI(base_url=b + "/v1", api_key="x", timeout=300, max_retries=0) for b in bases]


def _kwargs(choice: str, clients: list[openai.OpenAI]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"tools": [WEATHER], "temperature": 0, "max_tokens": 120}
    if choice == "auto":
        kwargs["tools"] = [LOOSE]
        kwargs["tool_choice"] = "auto"
        kwargs["extra_body"] = {"structured_outputs": {"regex": HERMES}}
    else:
        named = {"type": "function", "function": {"name": "get_weather"}}
        kwargs["tool_choice"] = named if choice == "named" else "required"
        kwargs["logit_bias"] = _no_whitespace(str(clients[0].base_url).removesuffix("/v1/"))
    return kwargs


def _streamed(client: openai.OpenAI, kwargs: dict[str, Any]) -> tuple[list[Any], list[str], str | None]:
    """The tool-call deltas of a streamed answer, its argument fragments (one per chunk that has
    one) and its finish reason."""
    chunks = list(client.chat.completions.create(model="llm", messages=MESSAGES, stream=True, **kwargs))  # type: ignore[arg-type]
    deltas, fragments, finish = [], [], None
    for chunk in chunks:
        if not chunk.choices:
            continue
        calls = chunk.choices[0].delta.tool_calls or []
        deltas += calls
        fragment = "".join(c.function.arguments or "" for c in calls if c.function)
        if fragment:
            fragments.append(fragment)
        finish = chunk.choices[0].finish_reason or finish
    return deltas, fragments, finish


@pytest.mark.parametrize("choice", ["required", "named", "auto"])
def test_a_streamed_tool_call_comes_as_argument_fragments(clients: list[openai.OpenAI], choice: str) -> None:
    kwargs = _kwargs(choice, clients)
    answers = []
    for client in clients:
        whole = client.chat.completions.create(model="llm", messages=MESSAGES, **kwargs)  # type: ignore[arg-type]
        calls = whole.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather", (client.base_url, whole)
        arguments = json.loads(calls[0].function.arguments)
        deltas, fragments, finish = _streamed(client, kwargs)
        assert deltas[0].index == 0 and deltas[0].id and deltas[0].function.name == "get_weather"
        assert all(d.index == 0 for d in deltas)  # one call
        assert len(fragments) >= 3, fragments  # its arguments in pieces, not whole at the end
        assert json.loads("".join(fragments)) == arguments
        assert finish == whole.choices[0].finish_reason == ("stop" if choice == "named" else "tool_calls")
        answers.append((arguments, fragments))
    (ours, our_fragments), (theirs, their_fragments) = answers
    assert ours == theirs  # greedy: the same call
    assert "".join(our_fragments) == "".join(their_fragments)
