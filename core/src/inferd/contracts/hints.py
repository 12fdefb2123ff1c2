""" "Did you mean" for a name someone got wrong (a model, a flag, a datatype). Only ever computed
on the error path, over names the asker may see."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from itertools import islice

#: Most candidate names compared (of a similar length; a repository of more models is compared on
#: its first ones): keeps an error answer cheap whatever the repository's size.
MAX_CANDIDATES = 256
#: Longest name a suggestion is looked for (a longer one is no typo of a model name).
MAX_WORD = 256


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word`` (difflib's ratio, at least 0.6), or None."""
    if len(word) > MAX_WORD:
        return None
    slack = max(2, len(word) // 3)  # a ratio of 0.6 allows no larger difference in length
    near = (c for c in candidates if abs(len(c) - len(word)) <= slack and c != word)
    names = list(islice(near, MAX_CANDIDATES))
    found = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, candidates: Iterable[str], quote: str = "'") -> str:
    """``did you mean 'x'?``, or "" when no candidate is close."""
    close = closest(word, candidates)
    return f"did you mean {quote}{close}{quote}?" if close is not None else ""
