"""Every name the vLLM backend and the OpenAI frontend borrow from vLLM beyond ``AsyncLLM`` and
``SamplingParams``, the version they were checked against, and :func:`check`, which looks for each
in the installed vLLM (``tests/plugins/backend_vllm/test_internals.py`` runs it).

Upgrading vLLM: install it, run that test, read vLLM's code for each name :func:`check` reports
(same meaning, same callers as ``vllm serve``'s?), run ``tests/plugins/backend_vllm/test_openai_vs_vllm.py``
(the answers side by side with ``vllm serve``), then set :data:`VERSION`.
"""

from __future__ import annotations

import importlib

#: The vLLM release every name below was checked against (the ``cpu`` extra pins it).
VERSION = "0.32.0"

#: (module, attribute path, private?, what for). Private names (a leading underscore) are the risk.
BORROWED: tuple[tuple[str, str, bool, str], ...] = (
    (
        "vllm.renderers.hf",
        "resolve_chat_template_content_format",
        False,
        "chat.VllmChat.render: whether a template loops over content parts (vllm serve's 'auto')",
    ),
    ("vllm.renderers.chat_utils", "parse_chat_messages", False, "chat.VllmChat.render: vllm serve's message parsing"),
    ("vllm.renderers.hf", "safe_apply_chat_template", False, "chat.VllmChat.render: vllm serve's chat rendering"),
    ("vllm.renderers", "TokenizeParams", False, "engine.Engine._check_limits: max_tokens beyond max_model_len"),
    ("vllm.inputs", "TokensPrompt", False, "engine: the input_ids prompt"),
    ("vllm.exceptions", "VLLMClientError", False, "engine, chat: the request's fault (a 400)"),
    ("vllm.exceptions", "VLLMValidationError", False, "chat: vLLM's validation errors and their parameter"),
    (
        "vllm.entrypoints.openai.chat_completion.protocol",
        "ChatCompletionRequest",
        False,
        "chat.VllmChat.tool_request: vLLM's request model (validation, structured outputs)",
    ),
    (
        "vllm.entrypoints.openai.chat_completion.protocol",
        "ChatCompletionRequest.extract_structured_outputs",
        False,
        "chat: response_format and structured_outputs as StructuredOutputsParams",
    ),
    (
        "vllm.entrypoints.openai.chat_completion.protocol",
        "ChatCompletionNamedToolChoiceParam",
        False,
        "chat: a named tool_choice",
    ),
    ("vllm.parser", "ParserManager.get_parser", False, "chat: the --tool-call-parser class"),
    (
        "vllm.parser.abstract_parser",
        "DelegatingParser.adjust_request",
        False,
        "chat: tool_choice required/named as a structured-output constraint",
    ),
    ("vllm.parser.abstract_parser", "DelegatingParser.parse", False, "chat: tool calls read from the output"),
    (
        "vllm.parser.abstract_parser",
        "DelegatingParser.parse_delta",
        False,
        "chat.ToolStream: streamed tool calls, argument fragments per piece (without it: whole at the end)",
    ),
    ("vllm.renderers.chat_utils", "make_tool_call_id", False, "chat: a tool call's id"),
    ("vllm.platforms", "current_platform.is_cpu", False, "quiet.explain_once: the CPU's start-up lines"),
    ("vllm.logging_utils", "NewLineFormatter", False, "quiet.write_config: vLLM's line layout in its processes"),
)


def check() -> list[str]:
    """What is missing from the installed vLLM: one line per borrowed name it no longer has."""
    problems = []
    for module, path, _, use in BORROWED:
        try:
            obj: object = importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"{module}: {exc} (used by {use})")
            continue
        for part in path.split("."):
            if not hasattr(obj, part):
                problems.append(f"{module}.{path}: missing (used by {use})")
                break
            obj = getattr(obj, part)
    return problems
