"""The models the OpenAI API serves (every ready text or embedding model, and each LoRA adapter of
one), and their tokenizers.

A LoRA adapter is served under its own name, as ``vllm serve --lora-modules`` serves it: a backend
whose ``Model`` lists ``lora_adapters`` (names; the vLLM backend's ``multi_lora.json``) answers a
request naming one with the ``lora_name`` parameter (Triton's vLLM backend's). A model's own name
wins over an adapter of the same name."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from inferd.api import CURRENT, InferdError, closest
from inferd_frontend_openai.embeddings import is_embedding_model
from inferd_frontend_openai.engine import is_text_model
from inferd_frontend_openai.errors import OpenAIError, bad_request, model_not_found
from inferd_frontend_openai.tokenizer import Tokenizer, find_tokenizer_dir, load, model_options, read_template

if TYPE_CHECKING:
    from inferd.api import ModelInfo, ServedModel


def served(info: ModelInfo) -> bool:
    """Whether this API serves ``info``: a text model (completions, chat) or an embedding model."""
    return is_text_model(info) or is_embedding_model(info)


class Models(Protocol):
    """The data plane's catalog: what serves a name now, and every serving version."""

    def served_model(self, name: str, version: str = "") -> ServedModel: ...
    def routed_model(self, name: str) -> ServedModel: ...
    def served_models(self) -> Sequence[ServedModel]: ...
    async def load_on_demand(self, name: str) -> None: ...


class Catalog:
    """Lists text models and hands out each one's tokenizer (loaded once, off the event loop)."""

    def __init__(
        self,
        models: Models,
        tokenizer_dir: Path | None = None,
        chat_template: str | None = None,
        tool_call_parser: str | None = None,
    ) -> None:
        self.models = models
        self.tokenizer_dir = tokenizer_dir
        #: ``--chat-template`` (its text) and ``--tool-call-parser``: every model's, unless its model.json says.
        self.chat_template = chat_template
        self.tool_call_parser = tool_call_parser
        self.created = int(time.time())
        self._tokenizers: dict[Path, object] = {}  # transformers tokenizers, by directory
        #: Each loaded version's tokenizer, looked up once (a reload makes a new version object).
        self._by_version: weakref.WeakKeyDictionary[ServedModel, Tokenizer] = weakref.WeakKeyDictionary()
        #: The loads under way (a request and the start-up warming share one).
        self._loading: weakref.WeakKeyDictionary[ServedModel, asyncio.Future[Tokenizer]] = weakref.WeakKeyDictionary()

    def listed(self) -> list[dict[str, object]]:
        """``GET /v1/models``'s ``data``: one entry per text model name the request's tenant may see."""
        return [self.entry(name) for name in self.names()]

    def names(self) -> list[str]:
        """The models (and their LoRA adapters) the request's tenant may see, sorted; an adapter is
        seen by whoever sees its model."""
        grant = CURRENT.get()
        names: set[str] = set()
        for mv in self.models.served_models():
            if served(mv.info) and (grant is None or grant.sees(mv.name)):
                names.add(mv.name)
                names.update(mv.lora_adapters)
        return sorted(names)

    def not_found(self, name: str) -> OpenAIError:
        """The 404 for ``name``, suggesting the closest text model the caller may see."""
        return model_not_found(name, closest(name, self.names()))

    def entry(self, name: str) -> dict[str, object]:
        """A model as ``/v1/models`` lists it; ``max_model_len`` where the backend knows it (vLLM's)."""
        entry: dict[str, object] = {
            "id": name,
            "object": "model",
            "created": self.created,
            "owned_by": "inferd",
            "root": name,
            "parent": None,
        }
        try:
            engine = self.models.served_model(name).chat_engine
        except InferdError:
            engine = None
        if engine is not None:
            entry["max_model_len"] = engine.max_model_len
        return entry

    async def loaded(self, name: str) -> None:
        """With ``--model-load-on-demand``, load ``name`` if it is not loaded (only a model the
        request's tenant may see: the others stay a 404)."""
        grant = CURRENT.get()
        if grant is None or grant.sees(name):
            await self.models.load_on_demand(name)

    def version(self, name: str) -> ServedModel:
        """The version serving ``name`` now (the base model of an adapter); a 404 when there is none,
        this API does not serve it, or the request's tenant may not see it."""
        return self.resolve(name)[0]

    def resolve(self, name: str) -> tuple[ServedModel, str | None]:
        """:meth:`version`, and the LoRA adapter ``name`` names (None when it names a model)."""
        grant = CURRENT.get()
        try:
            mv = self.models.routed_model(name)  # a model name names no version: the traffic split picks
        except InferdError:
            return self._adapter(name)
        if not served(mv.info) or (grant is not None and not grant.sees(name)):
            raise self.not_found(name)
        return mv, None

    def _adapter(self, name: str) -> tuple[ServedModel, str]:
        """The version whose backend serves LoRA adapter ``name`` (a scan: adapters only)."""
        grant = CURRENT.get()
        for mv in self.models.served_models():
            if name in mv.lora_adapters and served(mv.info) and (grant is None or grant.sees(mv.name)):
                return mv, name
        raise self.not_found(name)

    async def tokenizer(self, mv: ServedModel) -> Tokenizer:
        """``--openai-tokenizer``, else the tokenizer found in the model's directory."""
        tokenizer = self._by_version.get(mv)
        if tokenizer is not None:
            return tokenizer
        loading = self._loading.get(mv)
        if loading is None:
            loading = self._loading[mv] = asyncio.ensure_future(self._load(mv))
        try:
            tokenizer = self._by_version[mv] = await asyncio.shield(loading)
        finally:
            if loading.done():
                self._loading.pop(mv, None)
        return tokenizer

    async def warm(self) -> None:
        """Load every serving text model's tokenizer now (at start-up, in the background), so the
        first request does not wait for ``transformers`` to import; a failure waits for a request."""
        for mv in list(self.models.served_models()):
            if is_text_model(mv.info):
                with contextlib.suppress(OpenAIError):
                    await self.tokenizer(mv)

    async def _load(self, mv: ServedModel) -> Tokenizer:
        tokenizer = await self._tokenizer(mv)
        options = model_options(mv.directory, mv.version) if mv.directory is not None else {}
        tokenizer.tool_call_parser = options.get("tool_call_parser") or self.tool_call_parser
        return tokenizer

    async def _tokenizer(self, mv: ServedModel) -> Tokenizer:
        options = model_options(mv.directory, mv.version) if mv.directory is not None else {}
        template = self.chat_template
        if "chat_template" in options:
            try:
                template = await asyncio.to_thread(read_template, options["chat_template"], mv.directory)
            except ValueError as exc:
                raise OpenAIError(500, f"model '{mv.name}': model.json: {exc}", "server_error") from None
        engine = mv.chat_engine
        if engine is not None and self.tokenizer_dir is None:  # the engine's own tokenizer and renderer
            return Tokenizer(engine.tokenizer, engine, template)
        directory = self.tokenizer_dir
        if directory is None and mv.directory is not None:
            directory = await asyncio.to_thread(find_tokenizer_dir, mv.directory, mv.version)
        if directory is None:
            raise bad_request(
                f"model '{mv.name}' has no tokenizer: put tokenizer.json and tokenizer_config.json in "
                f"{mv.directory} (or its version folder, or a 'tokenizer' folder), or pass --openai-tokenizer",
                "model",
            )
        hf = self._tokenizers.get(directory)
        if hf is None:
            try:
                hf = self._tokenizers[directory] = await asyncio.to_thread(load, directory)
            except Exception as exc:  # transformers and tokenizers raise their own exception types
                raise OpenAIError(
                    500, f"model '{mv.name}': cannot load the tokenizer in {directory}: {exc}", "server_error"
                ) from None
        return Tokenizer(hf, None, template)
