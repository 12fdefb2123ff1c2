"""The models the OpenAI API serves (every ready text model), and their tokenizers."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from inferd.auth import CURRENT
from inferd.errors import InferdError
from inferd.hints import closest
from inferd_frontend_openai.engine import is_text_model
from inferd_frontend_openai.errors import OpenAIError, bad_request, model_not_found
from inferd_frontend_openai.tokenizer import Tokenizer, find_tokenizer_dir

if TYPE_CHECKING:
    from inferd.model_info import ModelInfo


class ServingVersion(Protocol):
    """A loaded model version, as the catalog reads it."""

    name: str
    version: int
    model_dir: Path | None
    info: ModelInfo


class Models(Protocol):
    """The server's model table: what serves a name now, and every serving version."""

    def resolve(self, name: str, version: str = "") -> ServingVersion: ...
    def routed(self, name: str) -> ServingVersion: ...
    def serving(self, name: str = "") -> Iterator[ServingVersion]: ...


class Catalog:
    """Lists text models and hands out each one's tokenizer (loaded once, off the event loop)."""

    def __init__(self, models: Models, tokenizer_dir: Path | None = None) -> None:
        self.models = models
        self.tokenizer_dir = tokenizer_dir
        self.created = int(time.time())
        self._tokenizers: dict[Path, Tokenizer] = {}
        #: Each loaded version's tokenizer, looked up once (a reload makes a new version object).
        self._by_version: weakref.WeakKeyDictionary[ServingVersion, Tokenizer] = weakref.WeakKeyDictionary()

    def listed(self) -> list[dict[str, object]]:
        """``GET /v1/models``'s ``data``: one entry per text model name the request's tenant may see."""
        return [self.entry(name) for name in self.names()]

    def names(self) -> list[str]:
        """The text models the request's tenant may see, sorted."""
        grant = CURRENT.get()
        names = sorted({mv.name for mv in self.models.serving() if is_text_model(mv.info)})
        return [name for name in names if grant.sees(name)] if grant is not None else names

    def not_found(self, name: str) -> OpenAIError:
        """The 404 for ``name``, suggesting the closest text model the caller may see."""
        return model_not_found(name, closest(name, self.names()))

    def entry(self, name: str) -> dict[str, object]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "inferd"}

    def version(self, name: str) -> ServingVersion:
        """The version serving ``name`` now; a 404 when there is none, it is no text model, or the
        request's tenant may not see it."""
        grant = CURRENT.get()
        if grant is not None and not grant.sees(name):
            raise self.not_found(name)
        try:
            mv = self.models.routed(name)  # a model name names no version: the traffic split picks
        except InferdError:
            raise self.not_found(name) from None
        if not is_text_model(mv.info):
            raise self.not_found(name)
        return mv

    async def tokenizer(self, mv: ServingVersion) -> Tokenizer:
        """``--openai-tokenizer``, else the tokenizer found in the model's directory."""
        tokenizer = self._by_version.get(mv)
        if tokenizer is None:
            tokenizer = self._by_version[mv] = await self._load(mv)
        return tokenizer

    async def _load(self, mv: ServingVersion) -> Tokenizer:
        directory = self.tokenizer_dir
        if directory is None and mv.model_dir is not None:
            directory = await asyncio.to_thread(find_tokenizer_dir, mv.model_dir, mv.version)
        if directory is None:
            raise bad_request(
                f"model '{mv.name}' has no tokenizer: put tokenizer.json and tokenizer_config.json in "
                f"{mv.model_dir} (or its version folder, or a 'tokenizer' folder), or pass --openai-tokenizer",
                "model",
            )
        tokenizer = self._tokenizers.get(directory)
        if tokenizer is None:
            try:
                tokenizer = await asyncio.to_thread(Tokenizer, directory)
            except Exception as exc:  # tokenizers raises its own exception types
                raise OpenAIError(500, f"model '{mv.name}': cannot load the tokenizer in {directory}: {exc}",
                                  "server_error") from None  # fmt: skip
            self._tokenizers[directory] = tokenizer
        return tokenizer
