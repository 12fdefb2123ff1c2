"""vLLM's request fields beyond OpenAI's, as ``vllm serve`` (0.32) takes them on ``/v1/completions``
and ``/v1/chat/completions``: each one is served or refused with a 400 naming it, never dropped.

- :data:`SAMPLING`: a field of vLLM's ``SamplingParams`` of the same name, sent to a model of the vLLM
  backend in its ``sampling_parameters`` (``vllm_xargs`` as ``extra_args``); a model of another
  backend refuses a value other than vLLM's default, since nothing would apply it.
  ``include_stop_str_in_output`` is also the frontend's own (it cuts stop strings for every backend).
- :data:`REFUSED`: what inferd does not serve (beam search, prompt logprobs, token-id outputs,
  multimodal, disaggregated serving, ...); a value other than vLLM's default is refused.

A field set to vLLM's default (or null) is accepted everywhere: it asks for nothing. A name neither
OpenAI's nor vLLM's is ignored, as ``vllm serve`` ignores it (its request models allow extra fields
and log them at debug level) and as OpenAI-compatible clients expect (aiperf, genai-perf and
LangChain send fields of their own).
"""

from __future__ import annotations

import json
from typing import Any

from inferd_frontend_openai.errors import bad_request

#: The fields of ``vllm serve``'s requests the rest of the frontend serves (:mod:`.params`, :mod:`.app`):
#: OpenAI's, vLLM's chat rendering, structured outputs, ``request_id`` (the response's id) and ``user``
#: (ignored, as vLLM ignores it).
SERVED = frozenset(
    (
        "model",
        "messages",
        "prompt",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "echo",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
        "chat_template",
        "chat_template_kwargs",
        "structured_outputs",
        "request_id",
        "user",
    )
)
#: vLLM sampling fields: name -> (JSON kind, vLLM's default).
SAMPLING: dict[str, tuple[str, object]] = {
    "ignore_eos": ("boolean", False),
    "min_tokens": ("integer", 0),
    "top_k": ("integer", None),
    "min_p": ("number", None),
    "repetition_penalty": ("number", None),
    "stop_token_ids": ("integers", None),
    "include_stop_str_in_output": ("boolean", False),
    "skip_special_tokens": ("boolean", True),
    "spaces_between_special_tokens": ("boolean", True),
    "allowed_token_ids": ("integers", None),
    "bad_words": ("strings", None),
    "watermarking": ("boolean", None),
    "stream_interval": ("integer", None),
    "vllm_xargs": ("object", None),
}
#: vLLM's name in ``SamplingParams`` where it differs from the request's.
_RENAMED = {"vllm_xargs": "extra_args"}

#: vLLM fields inferd does not serve: name -> vLLM's default (null is accepted too).
REFUSED: dict[str, object] = {
    "use_beam_search": False,
    "length_penalty": 1.0,
    "prompt_logprobs": None,
    "logprob_token_ids": None,
    "truncate_prompt_tokens": None,
    "truncation_side": None,
    "return_tokens_as_token_ids": False,
    "return_token_ids": False,
    "return_token_offsets": False,
    "return_prompt_text": False,
    "suffix": None,
    "prompt_embeds": None,
    "media_io_kwargs": None,
    "mm_processor_kwargs": None,
    "mm_payload": "tensors",
    "return_mm_kwargs": None,
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "cache_salt": None,
    "priority": 0,
    "session_id": None,
    "reasoning_effort": None,
    "include_reasoning": True,
    "thinking_token_budget": None,
    "parallel_tool_calls": True,
    "repetition_detection": None,
    "routed_experts_prompt_start": 0,
}
#: Per endpoint: chat's ``echo`` (vLLM repeats the last message) is not served; ``add_special_tokens``
#: defaults differ (a chat's rendered template carries its own).
_REFUSED_CHAT = {**REFUSED, "echo": False, "add_special_tokens": False}
_REFUSED_COMPLETION = {**REFUSED, "add_special_tokens": True}

_KINDS: dict[str, type | tuple[type, ...]] = {"boolean": bool, "integer": int, "number": (int, float), "object": dict}


def _is_default(value: object, default: object) -> bool:
    return (
        value is None
        or (type(value) is type(default) and value == default)
        or (default is None and (value is False or value == [] or value == {}))
    )


def _checked(name: str, kind: str, value: object) -> object:
    """``value`` if it is of ``kind`` (vLLM checks ranges), else a 400 naming ``name``."""
    if kind in ("integers", "strings"):
        item = int if kind == "integers" else str
        if not isinstance(value, list) or not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
            raise bad_request(f"'{name}' must be an array of {kind}", name)
        if kind == "integers" and any(v < 0 for v in value):
            raise bad_request(f"'{name}' must be an array of token ids (non-negative integers)", name)
        return value
    wanted = _KINDS[kind]
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, wanted):
        raise bad_request(f"'{name}' must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}", name)
    return value


def sampling(body: dict[str, Any], chat: bool) -> dict[str, object]:
    """The vLLM sampling fields ``body`` sets to other than their default, under ``SamplingParams``'
    names; a 400 naming the first field inferd does not serve that asks for something."""
    for name, default in (_REFUSED_CHAT if chat else _REFUSED_COMPLETION).items():
        value = body.get(name)
        if not _is_default(value, default):
            raise bad_request(
                f"'{name}' is not supported by this server (inferd); leave it out or set it to {_show(default)}", name
            )
    fields: dict[str, object] = {}
    for name, (kind, default) in SAMPLING.items():
        value = body.get(name)
        if value is not None:
            value = _checked(name, kind, value)
            if not _is_default(value, default):
                fields[_RENAMED.get(name, name)] = value
    return fields


def request_name(field: str) -> str:
    """The request's name of a ``SamplingParams`` field :func:`sampling` returned."""
    return next((k for k, v in _RENAMED.items() if v == field), field)


def _show(value: object) -> str:
    return json.dumps(value)
