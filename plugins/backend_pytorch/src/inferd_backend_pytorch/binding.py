"""How config.pbtxt's tensor names map to ``forward()``'s arguments and results.

Inputs follow Triton's pytorch backend, tried in this order:

1. every config input name is a ``forward`` argument name -> bound by name;
2. every name is ``<anything>__<index>`` (``INPUT__0``) -> bound to argument ``index``;
3. every name is ``ARGS[i]`` / ``KWARGS[key]`` (Triton's PT2 naming) -> bound by position / keyword;
4. otherwise -> bound in config order (Triton logs a warning and does the same).

A ``forward`` taking a single ``Dict[str, Tensor]`` receives ``{config input name: tensor}``.

Outputs are found in what ``forward`` returns (a tensor, a tuple/list, a dict, or nested ones) by,
for each config output: a top-level dict key equal to its name; a Triton PT2 path name
(``RESULT``, ``RESULT[0]``, ``RESULT[key][1]``); its ``__<index>`` suffix, counting the returned
tensors in order (``OUTPUT__1`` is the second); else its position in the config. A sequence
model's implicit state outputs (``sequence_batching.state.output_name``) the config does not list
come after the config's outputs, found the same way, so the sequence batcher can read them back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.api import ConfigError, InvalidArgument

if TYPE_CHECKING:
    from inferd.api import ModelConfig

log = logging.getLogger("inferd.pytorch")

_PATH_ARG = re.compile(r"^(ARGS)\[(\d+)\]$|^(KWARGS)\[([^\[\]]+)\]$")


@dataclass(frozen=True, slots=True)
class Argument:
    """One ``forward`` argument (``self`` excluded).

    ``kind``: "tensor", "optional" (Optional[Tensor]), "strings" (List[str]), "dict"
    (Dict[str, Tensor]) or "other".
    """

    name: str
    kind: str
    type_name: str = ""
    keyword_only: bool = False


@dataclass(frozen=True, slots=True)
class InputPlan:
    """How to call ``forward``: positional config names (``None``: pass None), keywords, or a dict."""

    positional: tuple[str | None, ...]
    keywords: tuple[tuple[str, str], ...]
    dict_input: bool
    strings: frozenset[str]
    convention: str


def index_suffix(name: str) -> int | None:
    """Triton's ``<name>__<index>``: the digits after the first ``__``, or None."""
    start = name.find("__")
    if start < 0:
        return None
    digits = name[start + 2 :]
    return int(digits) if digits.isdigit() else None


def plan_inputs(model: str, args: Sequence[Argument], names: Sequence[str]) -> InputPlan:
    """Bind config input ``names`` to ``forward`` ``args``; raise ConfigError when they disagree."""
    if not names:
        raise ConfigError(
            f"model '{model}': the pytorch backend needs every input declared in config.pbtxt, none were "
            f"specified (forward takes {_describe(args)})"
        )
    if len(args) == 1 and args[0].kind == "dict":
        return InputPlan((), (), True, frozenset(), "dict")
    for arg in args:
        if arg.kind == "dict":
            raise ConfigError(
                f"model '{model}': forward argument '{arg.name}' is a Dict; only a forward taking a single "
                f"Dict(str, Tensor) argument, or Tensor / List[str] arguments, is supported"
            )
        if arg.kind == "other":
            raise ConfigError(
                f"model '{model}': forward argument '{arg.name}' has type '{arg.type_name}'; only a single "
                f"Dict(str, Tensor) argument, or Tensor / List[str] arguments, are supported"
            )
    if len(args) != len(names):
        raise ConfigError(
            f"unable to load model '{model}', configuration expects {len(names)} inputs, model provides "
            f"{len(args)}: forward takes {_describe(args)}, config declares {list(names)}"
        )
    convention, slots = _bind(model, args, names)
    positional: list[str | None] = []
    keywords: list[tuple[str, str]] = []
    for arg, name in zip(args, slots, strict=True):
        if arg.keyword_only:
            keywords.append((arg.name, name))
        else:
            positional.append(name)
    strings = frozenset(name for arg, name in zip(args, slots, strict=True) if arg.kind == "strings")
    return InputPlan(tuple(positional), tuple(keywords), False, strings, convention)


def _bind(model: str, args: Sequence[Argument], names: Sequence[str]) -> tuple[str, list[str]]:
    """The naming convention and, for each argument in order, the config input bound to it."""
    arg_names = [a.name for a in args]
    if all(n in arg_names for n in names):
        return "forward argument", list(arg_names)
    indexes = [index_suffix(n) for n in names]
    if all(i is not None for i in indexes):
        return "<name>__<index>", _by_index(model, names, indexes, len(args))  # type: ignore[arg-type]
    paths = [_PATH_ARG.match(n) for n in names]
    if all(paths):
        order = []
        for m in paths:
            assert m is not None
            order.append(int(m.group(2)) if m.group(1) else _kw_index(model, m.group(4), args))
        return "ARGS[i]/KWARGS[key]", _by_index(model, names, order, len(args))
    log.warning(
        "model '%s': inputs %s are neither forward arguments (%s) nor follow the <name>__<index> naming "
        "convention; binding them in config order",
        model,
        list(names),
        ", ".join(arg_names),
    )
    return "config order", list(names)


def _by_index(model: str, names: Sequence[str], indexes: Sequence[int], count: int) -> list[str]:
    slots: list[str | None] = [None] * count
    for name, index in zip(names, indexes, strict=True):
        if index >= count:
            raise ConfigError(
                f"model '{model}': input '{name}' asks for forward argument {index}, but forward takes "
                f"{count} arguments (indexes 0..{count - 1})"
            )
        if slots[index] is not None:
            raise ConfigError(
                f"model '{model}': inputs '{slots[index]}' and '{name}' both name forward argument {index}"
            )
        slots[index] = name
    return slots  # type: ignore[return-value]  # every slot is filled: counts are equal, indexes unique


def _kw_index(model: str, key: str, args: Sequence[Argument]) -> int:
    for i, arg in enumerate(args):
        if arg.name == key:
            return i
    raise ConfigError(
        f"model '{model}': input 'KWARGS[{key}]' names no forward argument; forward takes {_describe(args)}"
    )


def _describe(args: Sequence[Argument]) -> str:
    return "(" + ", ".join(f"{a.name}: {a.type_name or a.kind}" for a in args) + ")"


def result_name(path: tuple[str | int, ...]) -> str:
    """Triton's PT2 name of a returned tensor: ``RESULT``, ``RESULT[0]``, ``RESULT[key][1]``."""
    return "RESULT" + "".join(f"[{k}]" for k in path)


def model_output_names(config: ModelConfig) -> list[str]:
    """What to take from ``forward``'s results: config outputs, then unlisted implicit state outputs."""
    names = [t.name for t in config.output]
    if config.WhichOneof("scheduling_choice") == "sequence_batching":
        names += [s.output_name for s in config.sequence_batching.state if s.output_name not in names]
    return names


class OutputPlan:
    """Finds each config output among the tensors ``forward`` returned."""

    def __init__(self, model: str, names: Sequence[str]) -> None:
        if not names:
            raise ConfigError(f"model '{model}': the pytorch backend needs every output declared in config.pbtxt")
        self.model = model
        self.names = tuple(names)
        indexes = [index_suffix(n) for n in names]
        self.indexes: tuple[int, ...] | None = tuple(indexes) if all(i is not None for i in indexes) else None  # type: ignore[arg-type]
        self._cache: dict[tuple[tuple[str | int, ...], ...], list[int]] = {}

    def resolve(self, paths: tuple[tuple[str | int, ...], ...]) -> list[int]:
        """For each config output, the position of its tensor in ``paths`` (the returned leaves)."""
        found = self._cache.get(paths)
        if found is None:
            found = self._resolve(paths)
            self._cache[paths] = found
        return found

    def _resolve(self, paths: tuple[tuple[str | int, ...], ...]) -> list[int]:
        by_key = {p[0]: i for i, p in enumerate(paths) if len(p) == 1 and isinstance(p[0], str)}
        by_result = {result_name(p): i for i, p in enumerate(paths)}
        out = []
        for position, name in enumerate(self.names):
            if name in by_key:
                out.append(by_key[name])
            elif name in by_result:
                out.append(by_result[name])
            else:
                index = self.indexes[position] if self.indexes is not None else position
                if index >= len(paths):
                    raise InvalidArgument(
                        f"model '{self.model}': output '{name}' asks for returned tensor {index}, but forward "
                        f"returned {len(paths)}: {', '.join(result_name(p) for p in paths)}"
                    )
                out.append(index)
        return out
