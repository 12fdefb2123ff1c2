"""The OpenAI API of ``inferd serve`` and of ``vllm serve``, side by side on the same tiny random Llama
folder (transformers 5.x layout: its chat template only in ``chat_template.jinja``), called with the
official ``openai`` client: the same prompts, token counts, greedy completions, limit errors and
tokenizer routes; structured outputs and forced tool calls that parse.

The servers are the conftest's :class:`SideBySide` (``llm`` also carries a LoRA adapter on both);
the module is marked ``vllm_serve`` so that a run can skip it.
"""

from __future__ import annotations

import json
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

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 6}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,  # the arguments follow the schema (not only "some JSON"), even from a random model
    },
}
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 8}


class Servers:
    """Both servers' clients and base URLs."""

    def __init__(self, inferd_port: int, vllm_port: int) -> None:
        self.inferd_base = f"http://127.0.0.1:{inferd_port}"
        self.vllm_base = f"http://127.0.0.1:{vllm_port}"
        self.inferd = openai.OpenAI(base_url=self.inferd_base + "/v1", api_key="x", timeout=120, max_retries=0)
        self.vllm = openai.OpenAI(base_url=self.vllm_base + "/v1", api_key="x", timeout=120, max_retries=0)

    def both(self) -> list[openai.OpenAI]:
        return [self.inferd, self.vllm]


@pytest.fixture(scope="module")
def servers(side_by_side: SideBySide) -> Servers:
    return Servers(side_by_side.inferd.ports["openai"], side_by_side.vllm_llm.port)


def chat(client: openai.OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    extra = {k: kwargs.pop(k) for k in ("add_generation_prompt", "continue_final_message") if k in kwargs}
    return client.chat.completions.create(model="llm", messages=messages, extra_body=extra or None,  # type: ignore[arg-type]
                                          **{**GREEDY, **kwargs})  # fmt: skip


MESSAGE_SETS: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
    "one user message": ([{"role": "user", "content": "hello world"}], {}),
    "system and user": ([{"role": "system", "content": "the quick brown fox"}, {"role": "user", "content": "hi"}], {}),
    "content parts": (
        [{"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]}],
        {},
    ),  # fmt: skip
    "no generation prompt": ([{"role": "user", "content": "a tiny model"}], {"add_generation_prompt": False}),
    "continue final message": (
        [{"role": "user", "content": "say"}, {"role": "assistant", "content": "the quick"}],
        {"add_generation_prompt": False, "continue_final_message": True},
    ),
    "tools passed to the template": (
        [{"role": "user", "content": "weather?"}],
        {"tools": [WEATHER], "tool_choice": "none"},
    ),  # fmt: skip
}


def test_chat_on_a_folder_whose_template_is_only_in_chat_template_jinja(servers: Servers) -> None:
    messages = [{"role": "user", "content": "hello world"}]
    ours, theirs = (chat(c, messages) for c in servers.both())
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason == "length"


@pytest.mark.parametrize("name", list(MESSAGE_SETS))
def test_prompt_tokens_and_greedy_answers_equal_vllms(servers: Servers, name: str) -> None:
    messages, kwargs = MESSAGE_SETS[name]
    ours, theirs = (chat(c, messages, **kwargs) for c in servers.both())
    assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens, name
    assert ours.choices[0].message.content == theirs.choices[0].message.content, name


def no_whitespace(servers: Servers) -> dict[str, int]:
    """``logit_bias`` that keeps a random model from spending its tokens on the whitespace a JSON
    grammar allows anywhere (so the constrained answer ends within ``max_tokens``)."""
    bias = {}
    for char in (" ", "\n", "\t", "\r"):
        body = {"model": "llm", "prompt": char, "add_special_tokens": False}
        for token in httpx.post(servers.inferd_base + "/tokenize", json=body, timeout=60).json()["tokens"]:
            bias[str(token)] = -100
    return bias


def test_json_schema_response_validates_against_the_schema(servers: Servers) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    for stream in (False, True):
        kwargs: dict[str, Any] = {"response_format": fmt, "max_tokens": 200, "stream": stream,
                                  "logit_bias": no_whitespace(servers)}  # fmt: skip
        reply = servers.inferd.chat.completions.create(model="llm", messages=[{"role": "user", "content": "hi"}],
                                                       temperature=0, **kwargs)  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in reply) if stream else reply.choices[0].message.content
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("choice", ["named", "required"])
def test_forced_tool_call_has_json_arguments_streamed_and_not(servers: Servers, choice: str) -> None:
    tool_choice: Any = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else "required"
    messages = [{"role": "user", "content": "weather in paris?"}]
    kwargs: dict[str, Any] = {"tools": [WEATHER], "tool_choice": tool_choice, "temperature": 0, "max_tokens": 120,
                              "logit_bias": no_whitespace(servers)}  # fmt: skip
    whole = servers.inferd.chat.completions.create(model="llm", messages=messages, **kwargs)  # type: ignore[arg-type]
    calls = whole.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather" and calls[0].type == "function"
    assert isinstance(json.loads(calls[0].function.arguments), dict)
    assert calls[0].id
    chunks = list(servers.inferd.chat.completions.create(model="llm", messages=messages, stream=True, **kwargs))  # type: ignore[arg-type]
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas and deltas[0].index == 0 and deltas[0].function.name == "get_weather" and deltas[0].id
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert json.loads(arguments) == json.loads(calls[0].function.arguments)
    theirs = servers.vllm.chat.completions.create(model="llm", messages=messages, **kwargs)  # type: ignore[arg-type]
    assert whole.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert calls[0].function.arguments == theirs.choices[0].message.tool_calls[0].function.arguments


def test_token_id_prompts_give_vllms_completions(servers: Servers) -> None:
    ids = httpx.post(servers.vllm_base + "/tokenize", json={"model": "llm", "prompt": "hello world"}, timeout=60)
    tokens = ids.json()["tokens"]
    prompts: list[Any] = [tokens, [tokens, tokens[:1]]]
    for prompt in prompts:
        ours, theirs = (c.completions.create(model="llm", prompt=prompt, **GREEDY) for c in servers.both())
        assert [c.text for c in ours.choices] == [c.text for c in theirs.choices]
        assert ours.usage.prompt_tokens == theirs.usage.prompt_tokens


def _status(client: openai.OpenAI, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    try:
        client.completions.create(model="llm", **kwargs)
    except openai.APIStatusError as exc:
        return exc.status_code, exc.response.json()["error"]
    return 200, {}


def test_limit_errors_match_vllms_statuses(servers: Servers) -> None:
    cases = {
        "max_tokens beyond the context": {"prompt": "hello", "max_tokens": MAX_MODEL_LEN + 1},
        "prompt beyond the context": {"prompt": [5] * (MAX_MODEL_LEN + 10), "max_tokens": 1},
        "prompt filling the context": {"prompt": [5] * MAX_MODEL_LEN, "max_tokens": 1},
    }
    for name, kwargs in cases.items():
        (ours, error), (theirs, _) = (_status(c, **kwargs) for c in servers.both())
        assert ours == theirs == 400, name
        assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    _, error = _status(servers.inferd, prompt="hello", max_tokens=MAX_MODEL_LEN + 1)
    assert error["message"].startswith(f"max_tokens={MAX_MODEL_LEN + 1} cannot be greater than max_model_len")


def test_models_carry_max_model_len(servers: Servers) -> None:
    ours, theirs = (next(m for m in c.models.list().data if m.id == "llm") for c in servers.both())
    assert ours.max_model_len == theirs.max_model_len == MAX_MODEL_LEN  # type: ignore[attr-defined]


def test_tokenize_and_detokenize_as_vllm_serves_them(servers: Servers) -> None:
    bodies = [
        {"model": "llm", "prompt": "hello world"},
        {"model": "llm", "prompt": "hello world", "add_special_tokens": False, "return_token_strs": True},
        {"model": "llm", "messages": [{"role": "user", "content": "hello"}]},
    ]
    for body in bodies:
        ours, theirs = (httpx.post(base + "/tokenize", json=body, timeout=60)
                        for base in (servers.inferd_base, servers.vllm_base))  # fmt: skip
        assert ours.status_code == theirs.status_code == 200
        mine, vllms = ours.json(), theirs.json()
        for key in ("count", "max_model_len", "tokens", "token_strs"):
            assert mine[key] == vllms[key], (body, key)
    tokens = httpx.post(servers.vllm_base + "/tokenize", json=bodies[0], timeout=60).json()["tokens"]
    ours, theirs = (httpx.post(base + "/detokenize", json={"model": "llm", "tokens": tokens}, timeout=60).json()
                    for base in (servers.inferd_base, servers.vllm_base))  # fmt: skip
    assert ours == theirs == {"prompt": "hello world"}


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         "response_format.json_schema.schema"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
    ],
)  # fmt: skip
def test_bad_tools_and_schemas_are_400_naming_the_field(servers: Servers, kwargs: dict[str, Any], param: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as exc:
        servers.inferd.chat.completions.create(model="llm", messages=messages, max_tokens=4, **kwargs)  # type: ignore[arg-type]
    assert exc.value.body["param"] == param  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):  # vllm serve refuses it too
        servers.vllm.chat.completions.create(model="llm", messages=messages, max_tokens=4, **kwargs)  # type: ignore[arg-type]


#: The tiny Llama's ``</s>``, and one of its ordinary tokens.
EOS, TOKEN = "1", 100
FORCE_EOS: dict[str, Any] = {"logit_bias": {EOS: 100}}
DRAW: dict[str, Any] = {"temperature": 1.0, "seed": 7}
#: vLLM's sampling fields: name -> (the request without the field, the field's value), each built so
#: that the field changes vllm serve's answer (the test checks it does). The others change nothing
#: this model shows (``spaces_between_special_tokens``: vLLM's fast detokenizer joins special tokens
#: either way) or only steer the engine: test_vllm_api.py checks they reach ``SamplingParams``.
SAMPLING_CASES: dict[str, tuple[dict[str, Any], Any]] = {
    "ignore_eos": (FORCE_EOS, True),
    "min_tokens": (FORCE_EOS, 3),
    "stop_token_ids": ({"logit_bias": {str(TOKEN): 100}}, [TOKEN]),
    "allowed_token_ids": ({}, [TOKEN, TOKEN + 1, TOKEN + 2]),
    "top_k": (DRAW, 1),
    "min_p": (DRAW, 1.0),
    "repetition_penalty": ({}, 2.0),
    "skip_special_tokens": ({**FORCE_EOS, "ignore_eos": True}, False),
    "include_stop_str_in_output": ({"stop": "(from the greedy text)"}, True),
}


def _completion(base: str, body: dict[str, Any]) -> tuple[str, str, int]:
    """The text, finish reason and completion tokens of a completion of "hello world" (greedy, 8 tokens)."""
    request = {"model": "llm", "prompt": "hello world", "max_tokens": 8, "temperature": 0, **body}
    response = httpx.post(base + "/v1/completions", json=request, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    choice = answer["choices"][0]
    return choice["text"], choice["finish_reason"], answer["usage"]["completion_tokens"]


@pytest.mark.parametrize("name", list(SAMPLING_CASES))
def test_vllm_sampling_fields_give_vllm_serves_answers(servers: Servers, name: str) -> None:
    without, value = SAMPLING_CASES[name]
    if name == "include_stop_str_in_output":  # a stop string from the middle of the greedy text
        text = _completion(servers.vllm_base, {})[0]
        without = {"stop": [text[len(text) // 2 : len(text) // 2 + 2]]}
    ours, theirs = (_completion(base, {**without, name: value}) for base in (servers.inferd_base, servers.vllm_base))
    assert ours == theirs, name
    assert theirs != _completion(servers.vllm_base, without), f"{name} changes nothing: the case tests nothing"


@pytest.mark.parametrize("stream", [False, True])
def test_ignore_eos_gives_a_chat_its_max_tokens(servers: Servers, stream: bool) -> None:
    """aiperf's fixed output length: a chat whose model says ``</s>`` at once gets max_tokens with ignore_eos."""
    counts = []
    for client in servers.both():
        for ignore in (False, True):
            kwargs: dict[str, Any] = {"max_tokens": 16, "temperature": 0, "logit_bias": FORCE_EOS["logit_bias"],
                                      "extra_body": {"ignore_eos": ignore}}  # fmt: skip
            if stream:
                chunks = list(client.chat.completions.create(model="llm", messages=[{"role": "user", "content": "hi"}],
                                                             stream=True, stream_options={"include_usage": True},
                                                             **kwargs))  # fmt: skip
                counts.append(chunks[-1].usage.completion_tokens)
            else:
                reply = client.chat.completions.create(
                    model="llm", messages=[{"role": "user", "content": "hi"}], **kwargs
                )
                counts.append(reply.usage.completion_tokens)
    assert counts[1] == counts[3] == 16  # ignore_eos: every one of its tokens
    assert counts[0] == counts[2] < 16  # without: it stops at </s>


def test_request_id_names_the_response_as_vllm_serve_names_it(servers: Servers) -> None:
    for client in servers.both():
        reply = client.chat.completions.create(model="llm", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                               extra_body={"request_id": "abc-1"})  # fmt: skip
        assert reply.id == "chatcmpl-abc-1"
        assert (
            client.completions.create(model="llm", prompt="hi", max_tokens=2, extra_body={"request_id": "x"}).id
            == "cmpl-x"
        )
