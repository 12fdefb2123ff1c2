"""A request without ``max_tokens`` on a vLLM model gets what ``vllm serve`` gives it: a chat the rest
of the context (``max_model_len`` minus the prompt's tokens), not vLLM ``SamplingParams``' 16; a
completion 16 (vLLM's ``CompletionRequest`` default, a null ``max_tokens`` included: OpenAI's too).
With ``ignore_eos`` the model generates all of it. The expected count is worked out here from
``MAX_MODEL_LEN`` and the tokenizer (transformers', on the model folder), and ``vllm serve``
beside it gives the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.lazy import lazy_import
from tests.plugins.backend_vllm.conftest import MAX_MODEL_LEN, SKIP, SideBySide

openai = lazy_import("openai")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm_serve,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(SKIP is not None, reason=SKIP or ""),
]

PROMPTS = ["hello world", "the quick brown fox jumps over the lazy dog"]
MESSAGES = [{"role": "user", "content": "hello there"}]


def _post(base: str, route: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/{route}", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _bases(side_by_side: SideBySide) -> list[str]:
    return [f"http://127.0.0.1:{side_by_side.inferd.ports['openai']}", side_by_side.vllm_llm.url]


@pytest.fixture(scope="module")
def tokenizer(chat_llama: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(chat_llama))


def test_a_chat_without_max_tokens_generates_the_rest_of_the_context(side_by_side: SideBySide, tokenizer: Any) -> None:
    # the rendered chat, tokenized without special tokens added (its template writes them); the
    # template loops over content parts, so vLLM passes the message's text as a part, as here
    parts = [{"role": "user", "content": [{"type": "text", "text": MESSAGES[0]["content"]}]}]
    ids = tokenizer.apply_chat_template(parts, add_generation_prompt=True, tokenize=True, return_dict=True)
    expected = MAX_MODEL_LEN - len(ids["input_ids"])
    assert expected > 16  # more than SamplingParams' default, or the test tells nothing
    for base in _bases(side_by_side):
        answer = _post(base, "chat/completions", {"model": "llm", "messages": MESSAGES, "ignore_eos": True})
        assert answer["usage"]["completion_tokens"] == expected, base
        assert answer["usage"]["prompt_tokens"] == MAX_MODEL_LEN - expected
        assert answer["choices"][0]["finish_reason"] == "length"
        limited = {"model": "llm", "messages": MESSAGES, "ignore_eos": True, "max_completion_tokens": 5}
        assert _post(base, "chat/completions", limited)["usage"]["completion_tokens"] == 5
    client = openai.OpenAI(base_url=_bases(side_by_side)[0] + "/v1", api_key="x", timeout=300, max_retries=0)
    chunks = list(client.chat.completions.create(model="llm", messages=MESSAGES, stream=True,  # type: ignore[arg-type]
                                                 stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True}))  # fmt: skip
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == expected


def test_a_completion_without_max_tokens_keeps_16(side_by_side: SideBySide) -> None:
    for base in _bases(side_by_side):
        for extra in ({}, {"max_tokens": None}):
            body = {"model": "llm", "prompt": PROMPTS, "ignore_eos": True, **extra}
            answer = _post(base, "completions", body)
            assert answer["usage"]["completion_tokens"] == 16 * len(PROMPTS), (base, extra)
