"""The command line's argument parsing: a parser that suggests the closest option for a mistyped
one, and the ``--backend-config`` setting format."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

_BACKEND_CONFIG_FORMAT = "--backend-config option format is '<backend name>,<setting>=<value>'. Got {}"


def backend_config_setting(value: str) -> tuple[str, str, str]:
    """``<backend>,<setting>=<value>`` or ``<setting>=<value>`` (every backend): ``(backend, setting,
    value)``, ``backend`` empty for the global form. Triton's parse rules and messages; the value
    may hold commas and ``=``."""
    comma, equals = value.find(","), value.find("=")
    if comma == 0:
        raise argparse.ArgumentTypeError(
            "No backend specified. --backend-config option format is <backend name>,<setting>=<value> "
            f"or <setting>=<value>. Got {value}"
        )
    backend, rest = "", value
    if comma > 0 and (equals < 0 or comma < equals):
        backend, rest = value[:comma], value[comma + 1 :]
    setting, eq, setting_value = rest.partition("=")
    if not eq or not setting or not setting_value:
        raise argparse.ArgumentTypeError(_BACKEND_CONFIG_FORMAT.format(value))
    return backend, setting, setting_value


class SuggestingParser(argparse.ArgumentParser):
    """argparse that answers a mistyped option with the closest known one (exit code 2, as argparse).

    Sub-commands made from it (``add_subparsers``) are of this class too, so ``inferd serve
    --strict-readyness=false`` says ``did you mean --strict-readiness?`` with serve's usage.
    Abbreviations are off: ``--model-repo`` is refused (did you mean --model-repository?), not
    taken silently for the option it is a prefix of.
    """

    def __init__(self, *, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=allow_abbrev, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._subparsers is None:  # a sub-command's options: answered before "required" errors
            listed = sys.argv[1:] if args is None else list(args)
            words = listed[: listed.index("--")] if "--" in listed else listed
            unknown = [a for a in words if a.startswith("--") and a.split("=", 1)[0] not in self._option_string_actions]
            if unknown:
                self._unrecognized(unknown)
        parsed, extras = super().parse_known_args(args, namespace)
        unknown = [a for a in extras if a.startswith("--")]
        if unknown:
            self._unrecognized(unknown)
        return parsed, extras

    def _unrecognized(self, unknown: list[str]) -> NoReturn:
        known = [o for o in self._option_string_actions if o.startswith("--")]
        parts = []
        for arg in unknown:
            flag = arg.split("=", 1)[0]
            longer = sorted((o for o in known if o.startswith(flag)), key=len)  # an abbreviation
            close = longer[:1] or difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            parts.append(f"{arg} (did you mean {close[0]}?)" if close else arg)
        self.error(f"unrecognized arguments: {' '.join(parts)}")

    def error(self, message: str) -> NoReturn:
        """The error (and its suggestion) first, then a one-line usage, not argparse's full usage:
        ``inferd serve``'s runs to several screens and would push the error out of sight."""
        usage = " ".join(self.format_usage().split())
        if len(usage) > 100:
            usage = f"usage: {self.prog} [OPTIONS]  (all options: {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}\n{usage}\n")
