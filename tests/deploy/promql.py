"""The metric names a PromQL expression reads (enough PromQL for dashboards and rules: functions,
aggregations with by/without, label matchers, ranges, vector matching, strings, numbers)."""

from __future__ import annotations

import re

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
             "inf", "nan"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Every metric an expression selects (identifiers that are not functions, keywords or labels)."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("", text.replace("<<.LabelMatchers>>", ""))
    text = _RANGES.sub("", text)
    text = _LABEL_LISTS.sub("", text)
    text = re.sub(r"<<[^>]*>>", "", text)  # prometheus-adapter template fields
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, call = match.groups()
        if call is None and name.lower() not in _KEYWORDS:
            names.add(name)
    return names
