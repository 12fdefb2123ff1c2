"""The body of ``/v1/completions`` and ``/v1/chat/completions``, checked field by field.

What the backend receives is Triton's vLLM ``sampling_parameters`` JSON: OpenAI's sampling fields
under vLLM's names (``max_tokens``, ``temperature``, ``top_p``, ``stop``, ``seed``, ...).
A wrong field is a 400 naming it (OpenAI's ``param``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferd_frontend_openai import extra_fields
from inferd_frontend_openai.errors import bad_request
from inferd_frontend_openai.tokenizer import ChatOptions

#: OpenAI's number fields passed through to the backend, with their allowed range.
_NUMBERS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
}
#: The most choices one request may ask for (``n``, times the prompts of a completion).
MAX_CHOICES = 128


@dataclass
class Generation:
    """One request, decoded: the prompts to run and how to sample them."""

    model: str
    #: Each prompt's text (a token-id prompt's decoded text, for ``echo``).
    prompts: list[str]
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    echo: bool = False
    #: Top candidates per token with ``logprobs`` (None: no logprobs asked for).
    logprobs: int | None = None
    #: The ``sampling_parameters`` for the backend (seed per choice is added when it runs).
    sampling: dict[str, Any] = field(default_factory=dict)
    #: Each prompt's token ids, where known (a token-id prompt, a rendered chat for a vLLM model):
    #: sent as the model's ``input_ids``.
    prompt_ids: list[list[int] | None] = field(default_factory=list)
    #: A chat request with tools or structured outputs, as the backend checked it (its ``ToolRequest``).
    tool: Any = None
    #: vLLM's sampling fields the request sets (:mod:`~inferd_frontend_openai.extra_fields`), under
    #: ``SamplingParams``' names: added to ``sampling`` for a model of the vLLM backend only.
    vllm: dict[str, Any] = field(default_factory=dict)
    #: Each prompt's ``max_tokens`` when the request sets none (None: the model's default), from
    #: ``--default-max-tokens`` and a vLLM model's context (``OpenAIApp._default_max_tokens``).
    prompt_max_tokens: list[int | None] = field(default_factory=list)
    #: vLLM's ``request_id``: the response's id is ``cmpl-`` / ``chatcmpl-`` and it ("": a random one).
    request_id: str = ""

    @property
    def tool_mode(self) -> str:
        """How the output is read for tool calls: ``""`` (not), ``auto``, ``required`` or ``named``."""
        return self.tool.mode if self.tool is not None else ""


def _int(body: dict[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{name}' must be an integer, got {json_type(value)}", name)
    if value < minimum:
        raise bad_request(f"{value} is less than the minimum of {minimum} - '{name}'", name)
    return value


def _bool(body: dict[str, Any], name: str, where: str = "") -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"'{where or name}' must be a boolean, got {json_type(value)}", where or name)
    return value


def json_type(value: object) -> str:
    """``value``'s JSON type name, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "value")


def _stop(body: dict[str, Any]) -> list[str]:
    value = body.get("stop")
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise bad_request("'stop' must be a non-empty string or an array of up to 4 non-empty strings", "stop")
    return stops


def decode(body: object, prompts: list[str | list[int]], chat: bool) -> Generation:
    """The :class:`Generation` a request body asks for, its ``prompts`` already worked out."""
    assert isinstance(body, dict)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("you must provide a model parameter", "model")
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise bad_request(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options"
            )
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object", "stream_options")
    include_usage = _bool(options or {}, "include_usage", "stream_options.include_usage")
    n = _int(body, "n", 1) or 1
    if n * len(prompts) > MAX_CHOICES:
        raise bad_request(f"at most {MAX_CHOICES} choices per request (n times the prompts)", "n")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    texts = [p if isinstance(p, str) else "" for p in prompts]
    gen = Generation(model, texts, n, stream, include_usage, max_tokens, _stop(body), _int(body, "seed", -(2**63)))
    gen.prompt_ids = [p if isinstance(p, list) else None for p in prompts]
    gen.echo = _bool(body, "echo")
    gen.logprobs = logprobs(body, chat)
    gen.sampling = _sampling(body, gen)
    gen.vllm = extra_fields.sampling(body, chat)
    request_id = body.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise bad_request(f"'request_id' must be a string, got {json_type(request_id)}", "request_id")
    gen.request_id = request_id or ""
    return gen


def _sampling(body: dict[str, Any], gen: Generation) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    for name, (low, high) in _NUMBERS.items():
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_request(f"'{name}' must be a number, got {json_type(value)}", name)
        if not low <= value <= high:
            raise bad_request(f"'{name}' must be between {low:g} and {high:g}, got {value}", name)
        sampling[name] = value
    bias = body.get("logit_bias")
    if bias is not None:
        sampling["logit_bias"] = _logit_bias(bias)
    if gen.max_tokens is not None:
        sampling["max_tokens"] = gen.max_tokens
    if gen.stop:
        sampling["stop"] = gen.stop
    if gen.logprobs is not None:
        sampling["logprobs"] = gen.logprobs
    return sampling


def _logit_bias(bias: object) -> dict[str, float]:
    """OpenAI's ``logit_bias``: token ids (as strings) to a bias in [-100, 100]."""
    ok = isinstance(bias, dict) and all(
        isinstance(k, str)
        and k.isdigit()
        and isinstance(v, (int, float))
        and not isinstance(v, bool)
        and -100 <= v <= 100
        for k, v in bias.items()
    )
    if not ok:
        raise bad_request("'logit_bias' must map token ids to numbers between -100 and 100", "logit_bias")
    return bias  # type: ignore[return-value]


def completion_prompts(body: object) -> list[str | list[int]]:
    """``prompt`` of a completion: a string, token ids, or an array of either."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt)
        if all(is_id(t) for t in prompt):
            return [prompt]
        if all(isinstance(p, list) and p and all(is_id(t) for t in p) for p in prompt):
            return list(prompt)
    raise bad_request(
        "'prompt' must be a string, an array of token ids (non-negative integers), or a non-empty array of either",
        "prompt",
    )


def is_id(value: object) -> bool:
    """Whether ``value`` is a token id (a non-negative integer)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def chat_messages(body: object) -> list[dict[str, Any]]:
    """``messages`` of a chat request, checked: each an object with a ``role``, its ``content`` a
    string, null or an array of text parts."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", "messages")
    for i, message in enumerate(messages):
        where = f"messages.[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"'{where}' must be an object with a 'role'", where)
        _check_content(message.get("content"), f"{where}.content")
    return messages


def _check_content(content: object, where: str) -> None:
    if content is None or isinstance(content, str):
        return
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"'{where}': only text content parts are supported", where)
        return
    raise bad_request(f"'{where}' must be a string or an array of content parts", where)


def chat_options(body: dict[str, Any]) -> ChatOptions:
    """How to render the chat: vLLM's ``add_generation_prompt``, ``continue_final_message``,
    ``chat_template_kwargs``, ``documents``, and the ``tools`` passed to the template."""
    add = body.get("add_generation_prompt", True)
    if not isinstance(add, bool):
        raise bad_request(f"'add_generation_prompt' must be a boolean, got {json_type(add)}", "add_generation_prompt")
    final = _bool(body, "continue_final_message")
    if final and add:
        raise bad_request(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.", "continue_final_message"
        )
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    if body.get("chat_template") is not None or kwargs.get("chat_template") is not None:
        raise bad_request(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.",
            "chat_template",
        )
    documents = body.get("documents")
    if documents is not None and not isinstance(documents, list):
        raise bad_request("'documents' must be an array of objects", "documents")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be an array", "tools")
    return ChatOptions(add, final, tools or None, documents, kwargs)


#: Fields only a backend with structured outputs (vLLM's) can serve.
STRUCTURED = ("tools", "tool_choice", "response_format", "structured_outputs")


def wants_structure(body: dict[str, Any]) -> str | None:
    """The first field asking for tools or structured outputs (a ``text`` response format asks none)."""
    for name in STRUCTURED:
        value = body.get(name)
        if value is not None and not (
            name == "response_format" and isinstance(value, dict) and value.get("type") == "text"
        ):
            return name
    return None


def logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many top candidates to return with each token's log-probability; None: no logprobs.

    Chat: ``logprobs`` (boolean) and ``top_logprobs`` (0-20); completions: ``logprobs`` (0-5)."""
    if not chat:
        return _int_in(body, "logprobs", 0, 5)
    wanted = _bool(body, "logprobs")
    top = _int_in(body, "top_logprobs", 0, 20)
    if top is not None and not wanted:
        raise bad_request("'logprobs' must be true when 'top_logprobs' is set", "top_logprobs")
    return (top or 0) if wanted else None


def _int_in(body: dict[str, Any], name: str, low: int, high: int) -> int | None:
    value = _int(body, name, low)
    if value is not None and value > high:
        raise bad_request(f"{value} is greater than the maximum of {high} - '{name}'", name)
    return value
