"""A model's Hugging Face tokenizer directory: token counts and its chat template.

The directory holds ``tokenizer.json`` (read with ``tokenizers``) and ``tokenizer_config.json``
(its ``chat_template``, ``bos_token``, ``eos_token``); a ``chat_template.jinja`` file, where
``transformers`` (4.43 on) saves the template, wins over the config's. The template is rendered as
``transformers`` renders it: a sandboxed Jinja environment with ``trim_blocks`` and
``lstrip_blocks``, ``raise_exception`` and ``tojson``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Where a model's tokenizer is looked for, relative to its model directory (``{v}``: its version).
_CANDIDATES = ("{v}/tokenizer", "tokenizer", "{v}", ".")


class TemplateError(ValueError):
    """The chat template failed on these messages (its ``raise_exception``, or a Jinja error)."""


class Tokenizer:
    """Counts tokens and applies the chat template of one tokenizer directory."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer as HfTokenizer

        self.directory = directory
        self._tokenizer = HfTokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"
        config: dict[str, Any] = json.loads(config_path.read_text()) if config_path.is_file() else {}
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        jinja = directory / "chat_template.jinja"
        self._template = _compile(jinja.read_text() if jinja.is_file() else config.get("chat_template"))

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def count(self, text: str) -> int:
        """Tokens in ``text`` (special tokens written in the text count as themselves)."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> str:
        """The prompt for ``messages``, ending with the assistant's generation prompt."""
        if self._template is None:
            raise TemplateError("the model's tokenizer has no chat_template")
        from jinja2 import TemplateError as JinjaError

        try:
            return self._template.render(
                messages=messages, add_generation_prompt=True, bos_token=self.bos_token, eos_token=self.eos_token
            )
        except JinjaError as exc:
            raise TemplateError(f"the chat template failed: {exc}") from None


def _token_text(value: object) -> str:
    """A special token as tokenizer_config.json writes it: text, or ``{"content": text, ...}``."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def _compile(source: object) -> Any:
    """The compiled Jinja template (``chat_template`` may be a list of named templates)."""
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if not isinstance(source, str):
        return None
    from jinja2 import TemplateError as JinjaError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
    try:
        return env.from_string(source)
    except JinjaError as exc:
        raise ValueError(f"tokenizer_config.json: chat_template does not compile: {exc}") from None


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
