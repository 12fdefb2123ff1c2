"""The OpenAI API through the official ``openai`` client, sync and async, streamed and not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from tests.lazy import lazy_import

from .chat_model import CHAT_TEMPLATE, count, expected_text
from .conftest import OpenAIServer

openai = lazy_import("openai")

MESSAGES = [{"role": "system", "content": "you are a helpful assistant"}, {"role": "user", "content": "say hello"}]


@pytest.fixture(scope="module")
def client(openai_server: OpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=openai_server.base_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(openai_server: OpenAIServer) -> Tokenizer:
    return Tokenizer.from_file(str(Path(openai_server.process.repositories[0]) / "chat" / "1" / "tokenizer.json"))


def chat_prompt(messages: list[dict[str, str]]) -> str:
    """The prompt as transformers renders the template (independently of the frontend)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True)


def test_models_lists_the_text_models_only(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["bare", "chat", "chat_folder", "chat_logprobs", "plain"]
    assert all(m.object == "model" and m.owned_by == "inferd" for m in models.data)
    assert client.models.retrieve("chat").id == "chat"


@pytest.mark.parametrize("name", ["missing", "add_one"])
def test_unknown_or_non_text_model_is_404(client: openai.OpenAI, name: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve(name)
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model=name, messages=MESSAGES)
    assert info.value.body == {"message": f"The model `{name}` does not exist.", "type": "invalid_request_error",
                               "param": "model", "code": "model_not_found"}  # fmt: skip


def test_chat_completion_applies_the_template_and_counts_tokens(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    reply = client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=5)
    prompt_tokens = count(tokenizer, chat_prompt(MESSAGES))
    text = expected_text(prompt_tokens, 5)
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-") and reply.model == "chat"
    [choice] = reply.choices
    assert choice.message.role == "assistant" and choice.message.content == text
    assert choice.finish_reason == "length"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (prompt_tokens, count(tokenizer, text))
    assert reply.usage.total_tokens == prompt_tokens + count(tokenizer, text)


def test_chat_stream_sends_role_then_deltas_then_finish_then_usage(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    chunks = list(client.chat.completions.create(model="chat", messages=MESSAGES, max_completion_tokens=4,
                                                 stream=True, stream_options={"include_usage": True}))  # fmt: skip
    prompt_tokens = count(tokenizer, chat_prompt(MESSAGES))
    text = expected_text(prompt_tokens, 4)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    deltas = [c.choices[0].delta.content for c in chunks[1:-2]]
    assert deltas == [text.split(" ")[0]] + [" " + w for w in text.split(" ")[1:]]  # one chunk per model response
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-2].choices[0].delta.content is None
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == count(tokenizer, text)
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.object == "chat.completion.chunk" for c in chunks)


def test_stop_string_cuts_the_text(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=8, stop=["gamma", "zzz"])
    assert reply.choices[0].message.content.endswith(" alpha beta ")
    assert reply.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model="chat", messages=MESSAGES, max_tokens=8, stop="gamma", stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == reply.choices[0].message.content


def test_completions_with_n_and_seed(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    reply = client.completions.create(model="chat", prompt="the quick brown fox", max_tokens=3, n=2, seed=4)
    prompt_tokens = count(tokenizer, "the quick brown fox")
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert [c.index for c in reply.choices] == [0, 1]
    assert [c.text for c in reply.choices] == [expected_text(prompt_tokens, 3, 4), expected_text(prompt_tokens, 3, 5)]
    assert reply.usage is not None and reply.usage.prompt_tokens == prompt_tokens  # the prompt counts once
    assert reply.usage.completion_tokens == sum(count(tokenizer, c.text) for c in reply.choices)


def test_completion_echo_and_prompt_list(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    reply = client.completions.create(model="chat", prompt=["alpha", "beta gamma"], max_tokens=2, echo=True)
    assert [c.text for c in reply.choices] == [
        "alpha" + expected_text(count(tokenizer, "alpha"), 2), "beta gamma" + expected_text(count(tokenizer, "beta gamma"), 2)
    ]  # fmt: skip


def test_tokenizer_in_a_tokenizer_folder(client: openai.OpenAI, tokenizer: Tokenizer) -> None:
    reply = client.chat.completions.create(model="chat_folder", messages=MESSAGES, max_tokens=2)
    assert reply.usage is not None and reply.usage.prompt_tokens == count(tokenizer, chat_prompt(MESSAGES))


def test_async_client_streams_and_answers(openai_server: OpenAIServer, tokenizer: Tokenizer) -> None:
    async def main() -> tuple[str, list[str]]:
        async with openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="unused", max_retries=0) as aclient:
            whole = await aclient.completions.create(model="chat", prompt="hello", max_tokens=6)
            stream = await aclient.completions.create(model="chat", prompt="hello", max_tokens=6, stream=True)
            texts = [c.choices[0].text async for c in stream]
        return whole.choices[0].text, texts

    whole, texts = asyncio.run(main())
    assert whole == expected_text(count(tokenizer, "hello"), 6)
    assert "".join(texts) == whole and len(texts) == 7  # six pieces, then the finish chunk's empty text


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"temperature": 3}, "temperature"),
        ({"top_p": -0.5}, "top_p"),
        ({"n": 0}, "n"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"logprobs": True}, "logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"messages": []}, "messages"),
    ],
)
def test_bad_request_is_400_naming_the_param(client: openai.OpenAI, kwargs: dict[str, object], param: str) -> None:
    args: dict[str, object] = {"model": "chat", "messages": MESSAGES, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**args)  # type: ignore[call-overload]
    assert info.value.status_code == 400 and info.value.param == param
    assert info.value.type == "invalid_request_error" and info.value.message


def test_model_without_chat_template_is_400_but_completes(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="plain", messages=MESSAGES)
    assert info.value.body["message"] == "model 'plain': the model's tokenizer has no chat_template"  # type: ignore[index]
    assert client.completions.create(model="plain", prompt="hi", max_tokens=1).choices[0].text.isdigit()


def test_model_error_is_500_server_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.completions.create(model="chat", prompt="please fail")
    assert info.value.status_code == 500 and info.value.body["message"] == "the model refuses to fail"  # type: ignore[index]
    assert info.value.type == "server_error"


def _probs(token: str) -> dict[str, object]:
    return {"token": token, "logprob": -0.25, "bytes": list(token.encode())}


def test_chat_logprobs_from_the_model(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="chat_logprobs", messages=MESSAGES, max_tokens=3, logprobs=True,
                                           top_logprobs=1)  # fmt: skip
    pieces = reply.choices[0].message.content.split(" ")
    pieces = [pieces[0]] + [" " + p for p in pieces[1:]]
    assert reply.choices[0].logprobs is not None
    assert reply.choices[0].logprobs.model_dump()["content"] == [
        {**_probs(p), "top_logprobs": [_probs(p)]} for p in pieces
    ]
    stream = client.chat.completions.create(model="chat_logprobs", messages=MESSAGES, max_tokens=3, logprobs=True,
                                            stream=True)  # fmt: skip
    streamed = [c.choices[0].logprobs.model_dump()["content"] for c in stream if c.choices[0].delta.content]
    assert streamed == [[{**_probs(p), "top_logprobs": []}] for p in pieces]


def test_completion_logprobs_from_the_model(client: openai.OpenAI) -> None:
    reply = client.completions.create(model="chat_logprobs", prompt="hi", max_tokens=3, logprobs=2, echo=True)
    text = reply.choices[0].text[len("hi") :]
    pieces = text.split(" ")
    pieces = [pieces[0]] + [" " + p for p in pieces[1:]]
    assert reply.choices[0].logprobs is not None
    assert reply.choices[0].logprobs.model_dump() == {
        "tokens": pieces, "token_logprobs": [-0.25] * 3, "top_logprobs": [{p: -0.25, "<alt>": -1.5} for p in pieces],
        "text_offset": [2, 2 + len(pieces[0]), 2 + len(pieces[0]) + len(pieces[1])],
    }  # fmt: skip


def test_logprobs_bounds(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="chat_logprobs", prompt="hi", logprobs=6)
    assert info.value.param == "logprobs"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="chat_logprobs", messages=MESSAGES, top_logprobs=2)
    assert info.value.param == "top_logprobs"


@pytest.mark.parametrize(
    ("messages", "extra", "rendered"),
    [
        ([{"role": "user", "content": [{"type": "text", "text": "say"}, {"type": "text", "text": "hello"}]}], {},
         "<|user|>\nsay\nhello<|end|>\n<|assistant|>\n"),
        (MESSAGES[1:], {"add_generation_prompt": False}, "<|user|>\nsay hello<|end|>\n"),
        ([*MESSAGES[1:], {"role": "assistant", "content": "hello"}],
         {"add_generation_prompt": False, "continue_final_message": True}, "<|user|>\nsay hello<|end|>\n<|assistant|>\nhello"),
    ],
)  # fmt: skip
def test_chat_renders_as_vllm_serve_does(client: openai.OpenAI, tokenizer: Tokenizer, messages: list[dict[str, object]],
                                         extra: dict[str, object], rendered: str) -> None:  # fmt: skip
    """Text parts joined with newlines, no generation prompt, the final message continued (its end cut)."""
    reply = client.chat.completions.create(model="chat", messages=messages, max_tokens=2, extra_body=extra)  # type: ignore[arg-type]
    assert reply.usage is not None and reply.usage.prompt_tokens == count(tokenizer, rendered)
    assert reply.choices[0].message.content == expected_text(count(tokenizer, rendered), 2)


def test_chat_with_both_prompt_flags_or_a_request_template_is_400(client: openai.OpenAI) -> None:
    for extra, param in (({"continue_final_message": True}, "continue_final_message"),
                         ({"chat_template": "{{ messages }}"}, "chat_template")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="chat", messages=MESSAGES, extra_body=extra)
        assert info.value.body["param"] == param  # type: ignore[index]


def test_tools_on_a_model_without_structured_outputs_are_400(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    for kwargs, param in (
        ({"tools": [tool]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="chat", messages=MESSAGES, **kwargs)  # type: ignore[arg-type]
        assert info.value.body["param"] == param  # type: ignore[index]
        assert "does not serve" in info.value.message
