"""A model's tokenizer and chat template, from the libraries that own them.

A vLLM model offers its engine's tokenizer and ``vllm serve``'s own chat rendering (the backend's
``VllmModel.openai``, read duck-typed: :class:`EngineChat`); any other text model gets the Hugging
Face tokenizer of its folder through ``transformers`` (its fast tokenizer, which reads
``chat_template.jinja``, ``additional_chat_templates/`` and named templates) and its
``apply_chat_template``. Either way the template is compiled once (the libraries cache it); a vLLM
model's messages are parsed by vLLM, others reach the template as ``vllm serve`` passes them to a
template that reads content as a string (text parts joined with newlines).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

#: Where a model's tokenizer is looked for, relative to its model directory (``{v}``: its version).
#: One tokenizer load at a time: transformers' lazy module is not safe to import from two threads at
#: once (the second can see it half-initialized: "cannot import name 'PreTrainedTokenizerFast'"), and
#: the start-up warming and a first request may load at the same moment.
_LOADING = threading.Lock()
_CANDIDATES = ("{v}/tokenizer", "tokenizer", "{v}", ".")
#: ``model.json`` keys the frontend reads (``vllm serve``'s ``--chat-template`` and ``--tool-call-parser``).
MODEL_JSON_KEYS = ("chat_template", "tool_call_parser")


class TemplateError(ValueError):
    """The chat template failed on these messages (its ``raise_exception``), or there is none."""


class EngineChat(Protocol):
    """What a backend's model may offer the frontend as its ``openai`` attribute (the vLLM backend does)."""

    tokenizer: Any
    max_model_len: int

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str: ...

    def tool_request(self, body: dict[str, Any], tool_parser: str | None) -> Any: ...

    def tool_calls(self, prepared: Any, text: str) -> tuple[str | None, list[dict[str, Any]]]: ...


class ToolStream(Protocol):
    """A backend's reader of one choice's streamed text: its content and tool-call deltas per piece
    (an engine offers it with an optional ``tool_stream(prepared, prompt_ids)``: the vLLM backend's)."""

    def feed(self, text: str, finished: bool) -> tuple[str | None, list[dict[str, Any]]]: ...


@dataclass
class ChatOptions:
    """How to render one chat request (vLLM's request fields of the same names)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    documents: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


class Tokenizer:
    """Counts, encodes and decodes tokens and renders chat prompts for one model.

    ``hf``: a ``transformers`` tokenizer; ``engine``: the backend's renderer (None: transformers');
    ``chat_template``: the ``--chat-template`` / ``model.json`` override (None: the tokenizer's)."""

    def __init__(self, hf: Any, engine: EngineChat | None = None, chat_template: str | None = None) -> None:
        self.hf = hf
        self.engine = engine
        self.chat_template = chat_template
        #: The name of the model's vLLM tool-call parser (``--tool-call-parser``, ``model.json``), or None.
        self.tool_call_parser: str | None = None
        #: The model's context length context length, where the backend knows it (None: unknown).
        self.max_model_len = engine.max_model_len if engine is not None else None
        self.has_chat_template = bool(chat_template or getattr(hf, "chat_template", None))

    def count(self, text: str) -> int:
        """Tokens in ``text`` (special tokens written in the text count as themselves)."""
        return len(self.encode(text))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int]) -> str:
        return str(self.hf.decode(ids))

    def render(self, messages: list[dict[str, Any]], options: ChatOptions) -> str:
        """The prompt for ``messages``, rendered as ``vllm serve`` renders it."""
        if not self.has_chat_template:
            raise TemplateError("the model's tokenizer has no chat_template")
        kwargs: dict[str, Any] = {
            **options.template_kwargs,
            "add_generation_prompt": options.add_generation_prompt,
            "continue_final_message": options.continue_final_message,
            "tools": options.tools,
            "chat_template": self.chat_template,
        }
        if options.documents is not None:
            kwargs["documents"] = options.documents
        try:
            if self.engine is not None:  # vLLM parses the messages itself
                return self.engine.render(messages, **kwargs)
            conversation = [_message(m) for m in messages]
            return str(self.hf.apply_chat_template(conversation, tokenize=False, **kwargs))
        except Exception as exc:  # the template's raise_exception, jinja's errors, transformers' ValueError
            raise TemplateError(f"the chat template failed: {exc}") from None


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """One message as ``vllm serve`` hands it to a template that reads content as a string: text
    parts joined with newlines, null content as ``""``, tool-call arguments parsed into objects."""
    out = dict(message)
    content = message.get("content")
    if isinstance(content, list):
        out["content"] = "\n".join(p["text"] for p in content)
    elif content is None:
        out["content"] = ""
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_parsed_arguments(c) for c in calls]
    return out


def _parsed_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        try:
            return {**call, "function": {**function, "arguments": json.loads(function["arguments"])}}
        except ValueError:
            return call
    return call


def load(directory: Path) -> Any:
    """The ``transformers`` fast tokenizer saved in ``directory`` (blocking: run it off the event loop).
    ``PreTrainedTokenizerFast`` reads the folder as ``AutoTokenizer`` does (``tokenizer.json``, the
    config's special tokens, ``chat_template.jinja``) without importing a model framework."""
    with _LOADING:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(directory), local_files_only=True)


def read_template(value: str, base: Path | None = None) -> str:
    """``--chat-template`` as vLLM reads it: a file (relative to ``base``), else the template itself."""
    for path in (Path(value), (base / value) if base is not None else None):
        try:
            if path is not None and path.is_file():
                return path.read_text(encoding="utf-8")
        except OSError:
            continue
    if "{" not in value:
        raise ValueError(f"chat template '{value}': no such file (and it is not a Jinja template)")
    return value


def model_options(model_dir: Path, version: int) -> dict[str, Any]:
    """The frontend's keys of a vLLM ``model.json`` (:data:`MODEL_JSON_KEYS`), if it has one."""
    path = model_dir / str(version) / "model.json"
    try:
        args = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return {k: args[k] for k in MODEL_JSON_KEYS if isinstance(args, dict) and isinstance(args.get(k), str)}


def find_tokenizer_dir(model_dir: Path, version: int) -> Path | None:
    """The tokenizer directory of a model: a ``tokenizer`` folder or the folder itself (version
    first), or the Hugging Face directory a vLLM ``model.json`` names (``tokenizer`` or ``model``)."""
    for pattern in _CANDIDATES:
        candidate = model_dir / pattern.format(v=version)
        if (candidate / "tokenizer.json").is_file():
            return candidate
    engine_args = model_dir / str(version) / "model.json"
    if engine_args.is_file():
        try:
            args = json.loads(engine_args.read_text())
        except (OSError, ValueError):
            return None
        for key in ("tokenizer", "model"):
            value = args.get(key) if isinstance(args, dict) else None
            if not isinstance(value, str):
                continue
            for path in (Path(value), model_dir / str(version) / value):
                if (path / "tokenizer.json").is_file():
                    return path
    return None
