"""What the OpenAI frontend asks of a vLLM model: the engine's own tokenizer, its context length,
and chat rendering with the code ``vllm serve`` runs (:func:`vllm.renderers.hf.safe_apply_chat_template`:
vLLM's template resolution, its ``developer``-role handling and its filtering of template kwargs).

The model offers it as ``Model.chat_engine`` (``inferd.api.ChatEngine``); the frontend reaches it
through the data plane's catalog (``ServedModel.chat_engine``), so it imports no vLLM itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionNamedToolChoiceParam, ChatCompletionRequest
from vllm.exceptions import VLLMClientError, VLLMValidationError
from vllm.parser import ParserManager
from vllm.renderers.chat_utils import make_tool_call_id, parse_chat_messages
from vllm.renderers.hf import resolve_chat_template_content_format, safe_apply_chat_template


class TemplateRejected(ValueError):
    """The chat template refused the messages (its ``raise_exception``), or there is none."""


class BadRequest(ValueError):
    """The request is wrong (vLLM's validation said so): a 400 naming ``param``."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ToolRequest:
    """A chat request with tools or structured outputs, checked and adjusted as ``vllm serve`` does:
    ``structured_outputs`` (JSON for the ``sampling_parameters`` tensor, None: none), the tool dicts
    passed to the template, and how its output is parsed (``mode``: ``""``, ``auto``, ``required``
    or ``named``)."""

    request: ChatCompletionRequest
    structured_outputs: dict[str, Any] | None
    tools: list[dict[str, Any]] | None
    mode: str
    parser: Any = None


class VllmChat:
    """The engine's tokenizer, ``max_model_len`` and chat rendering, for one model version."""

    def __init__(self, engine: Any) -> None:
        self.model_config = engine.model_config
        self.tokenizer = engine.tokenizer
        self.max_model_len: int = self.model_config.max_model_len
        self._parsers: dict[str, Any] = {}

    def parser(self, name: str) -> Any:
        """vLLM's parser class for tool-call parser ``name`` (made once; an unknown name is a 400)."""
        parser = self._parsers.get(name)
        if parser is None:
            try:
                parser = ParserManager.get_parser(
                    tool_parser_name=name,
                    enable_auto_tools=True,
                    model_name=self.model_config.model,
                    tokenizer=self.tokenizer,
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise BadRequest(f"tool-call parser '{name}': {exc}", "tools") from None
            self._parsers[name] = parser
        return parser

    def tool_request(self, body: dict[str, Any], tool_parser: str | None) -> ToolRequest:
        """Validate ``body`` as vLLM's ``ChatCompletionRequest`` and work out its structured outputs
        (``response_format``, ``structured_outputs``, a ``required`` or named ``tool_choice``) with
        the tool parser's ``adjust_request``, as ``vllm serve --tool-call-parser`` does."""
        try:
            request = ChatCompletionRequest.model_validate(body)
        except VLLMValidationError as exc:
            raise BadRequest(str(exc), exc.parameter) from None
        except ValueError as exc:  # pydantic's ValidationError: its first error, naming the field
            errors: list[Any] = getattr(exc, "errors", list)()
            if not errors:
                raise BadRequest(str(exc)) from None
            where = ".".join(str(p) for p in errors[0]["loc"] if "(" not in str(p))
            raise BadRequest(f"{errors[0]['msg']} - '{where}'", where) from None
        choice = request.tool_choice
        named = isinstance(choice, ChatCompletionNamedToolChoiceParam)
        mode = "" if not request.tools or choice in (None, "none") else "named" if named else str(choice)
        parser = self.parser(tool_parser) if tool_parser else None
        if mode and parser is None:
            what = f'function "{choice.function.name}"' if named else f'"{choice}"'  # type: ignore[union-attr]
            raise BadRequest(f"tool_choice={what} requires --tool-call-parser to be set", "tool_choice")
        if mode and parser is not None:
            try:
                kwargs = request.chat_template_kwargs or {}
                adjuster = parser(
                    self.tokenizer, request.tools, model_config=self.model_config, chat_template_kwargs=kwargs
                )
                request = adjuster.adjust_request(request)
            except (VLLMClientError, ValueError) as exc:
                raise BadRequest(str(exc), "tool_choice") from None
        # vllm serve passes the tools even with tool_choice "none"
        tools = [t.model_dump() for t in request.tools] if request.tools else None
        structured = _as_json(request.extract_structured_outputs())
        if structured is not None and isinstance(structured.get("json"), dict):
            _check_schema(structured["json"], "structured_outputs.json" if mode else _schema_field(body))
        return ToolRequest(request, structured, tools, mode, parser)

    def tool_calls(self, prepared: ToolRequest, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """The content and the tool calls in a finished output ``text`` (vLLM's parser's reading)."""
        if not prepared.mode or prepared.parser is None:
            return text, []
        kwargs = prepared.request.chat_template_kwargs or {}
        parser = prepared.parser(
            self.tokenizer, prepared.request.tools, model_config=self.model_config, chat_template_kwargs=kwargs
        )
        _, content, calls = parser.parse(text, prepared.request, enable_auto_tools=True)
        out = [
            {
                "id": getattr(c, "id", None) or make_tool_call_id(),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in calls or []
        ]
        return content, out

    def tool_stream(self, prepared: ToolRequest, prompt_ids: list[int] | None) -> ToolStream | None:
        """A reader of one choice's streamed output into content and tool-call deltas, as ``vllm
        serve`` streams them (None: the request reads no tool calls, or this vLLM's parser cannot
        stream: its calls are then read whole when the choice ends)."""
        if not prepared.mode or prepared.parser is None or not hasattr(prepared.parser, "parse_delta"):
            return None
        kwargs = prepared.request.chat_template_kwargs or {}
        parser = prepared.parser(
            self.tokenizer, prepared.request.tools, model_config=self.model_config, chat_template_kwargs=kwargs
        )
        return ToolStream(parser, prepared.request, self.tokenizer, prompt_ids)

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        """The prompt text for the request's ``messages`` (``kwargs``: the template's: ``chat_template``,
        ``tools``, ``add_generation_prompt``, ``continue_final_message``, ...), as ``vllm serve``
        renders them: vLLM's message parsing (content parts joined or kept as parts, as the template
        reads them: ``--chat-template-content-format auto``), then its template application."""
        try:
            content_format = resolve_chat_template_content_format(
                kwargs.get("chat_template"), kwargs.get("tools"), "auto", self.tokenizer, model_config=self.model_config
            )
            conversation, _, _ = parse_chat_messages(messages, self.model_config, content_format)  # type: ignore[arg-type]
            return safe_apply_chat_template(self.model_config, self.tokenizer, conversation, tokenize=False, **kwargs)
        except (VLLMClientError, ValueError) as exc:
            raise TemplateRejected(str(exc)) from None


class ToolStream:
    """vLLM's parser reading one choice's output as it streams (``Parser.parse_delta``, what ``vllm
    serve`` calls per output): content, and each tool call's id and name, then its arguments in
    fragments. The model sends text only, so each piece's token ids are the tokenizer's reading of
    it (the Hermes parser reads text; a parser that looks for a special token finds it there too)."""

    def __init__(
        self, parser: Any, request: ChatCompletionRequest, tokenizer: Any, prompt_ids: list[int] | None
    ) -> None:
        self.parser = parser
        self.request = request
        self.tokenizer = tokenizer
        #: The parser's reasoning check needs the prompt's ids (with no reasoning parser: any list).
        self.prompt_ids = prompt_ids if prompt_ids is not None else []

    def feed(self, text: str, finished: bool) -> tuple[str | None, list[dict[str, Any]]]:
        """The content and the tool-call deltas (OpenAI's ``delta.tool_calls`` entries) that ``text``,
        the choice's next piece, adds; ``finished``: it is the last piece."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []
        delta = self.parser.parse_delta(text, ids, self.request, self.prompt_ids, finished=finished)
        if delta is None:
            return None, []
        calls = [call.model_dump(exclude_none=True) for call in delta.tool_calls or []]
        return delta.content or None, calls


def _as_json(params: Any) -> dict[str, Any] | None:
    """``StructuredOutputsParams`` as the ``sampling_parameters`` JSON carries it (fields set only)."""
    if params is None:
        return None
    return {
        f.name: value
        for f in dataclasses.fields(params)
        if not f.name.startswith("_") and (value := getattr(params, f.name)) != f.default
    }


def _schema_field(body: dict[str, Any]) -> str:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return "response_format.json_schema.schema"
    return "structured_outputs.json"


def _check_schema(schema: dict[str, Any], where: str) -> None:
    """A JSON schema that is no valid schema is the request's fault (a 400 naming ``where``), not the engine's."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise BadRequest(f"'{where}' is not a valid JSON schema: {exc.message}", where) from None
