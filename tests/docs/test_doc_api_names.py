"""docs/hooks.md names only what the plugin API has: each API name in its inline code spans
exists in ``inferd.api`` (or, for the test kit it documents, ``inferd.testing``), so the page
cannot drift from the code.

What counts as an API name, in an inline code span (fenced blocks are examples, run elsewhere):

- ``inferd.api.X`` anywhere in the span (``request.context[inferd.api.RESCHEDULE] = True``): ``X``
  must be in ``inferd.api``;
- a span that is a CapWords name, optionally with one attribute and a call's arguments
  (``AsyncInstance``, ``SyncInstance.may_run_inline``, ``InferdError(message, kind)``): the name
  must be in ``inferd.api`` or ``inferd.testing`` (or be a Python builtin, such as ``ImportError``),
  and the attribute must be on it.

Upper-case constants, hook and method names in lower case, flags and paths are not API names here.
"""

from __future__ import annotations

import builtins
import keyword
import re
from pathlib import Path
from types import ModuleType

import inferd.api
import inferd.testing

HOOKS_MD = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
#: Names the page gives as other projects' classes, each with where it comes from.
FOREIGN = {"AsyncLLM": "vLLM's engine"}

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"\binferd\.api\.([A-Za-z_]\w*)")
_CAPWORDS = re.compile(r"([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)*)(?:\.([a-z_]\w*))?(?:\(.*\))?")


def code_spans(markdown: str) -> list[str]:
    """The inline code spans of ``markdown``, fenced blocks left out."""
    return _SPAN.findall(_FENCE.sub("", markdown))


def api_names(span: str) -> list[tuple[str, str | None, bool]]:
    """The API names a code span gives: (name, attribute or None, whether it is ``inferd.api.``-qualified).
    ``None``, ``True`` and ``False`` are Python's."""
    dotted = [(name, None, True) for name in _DOTTED.findall(span)]
    found = _CAPWORDS.fullmatch(span)
    named = found is not None and not keyword.iskeyword(found.group(1))
    return dotted + ([(found.group(1), found.group(2), False)] if named else [])


def missing(name: str, attribute: str | None, qualified: bool) -> str | None:
    """Why ``name`` (and its ``attribute``) does not resolve, or None when it does."""
    homes: tuple[ModuleType, ...] = (inferd.api,) if qualified else (inferd.api, inferd.testing)
    owner = next((getattr(m, name) for m in homes if hasattr(m, name)), None)
    if owner is None and not qualified:
        owner = getattr(builtins, name, None)
    if owner is None:
        return None if name in FOREIGN and not qualified else f"{name}: not in {' or '.join(m.__name__ for m in homes)}"
    if attribute is not None and not hasattr(owner, attribute):
        return f"{name}.{attribute}: {name} has no attribute {attribute!r}"
    return None


def test_the_extraction_finds_what_it_should():
    text = (
        "Use `inferd.api.RESCHEDULE` and `request.context[inferd.api.Rejected] = 1`; subclass `AsyncInstance`,\n"
        "read `SyncInstance.may_run_inline`, raise `InferdError(message, kind)`; not `execute`, `KIND_CPU`, `None`,\n"
        "`--workers N` or `docs/examples/`.\n```python\nfrom inferd.api import NotInTheApi\n`Fenced`\n```\n"
    )
    names = [n for span in code_spans(text) for n in api_names(span)]
    assert names == [
        ("RESCHEDULE", None, True),
        ("Rejected", None, True),
        ("AsyncInstance", None, False),
        ("SyncInstance", "may_run_inline", False),
        ("InferdError", None, False),
    ]
    assert missing("NoSuchName", None, False) == "NoSuchName: not in inferd.api or inferd.testing"
    assert missing("ServerProcess", None, True) == "ServerProcess: not in inferd.api"
    assert missing("ImportError", None, False) is None


def test_every_api_name_in_hooks_md_exists():
    spans = code_spans(HOOKS_MD.read_text())
    problems = sorted({p for span in spans for n in api_names(span) if (p := missing(*n))})
    assert len(spans) > 100, "the page's code spans were not found: the check would pass on anything"
    assert not problems, "docs/hooks.md names what the API does not have:\n" + "\n".join(problems)
