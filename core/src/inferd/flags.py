"""Argument types shared by the CLI and the plugins that add ``inferd serve`` options."""

from __future__ import annotations

import argparse


def parse_bool(value: str) -> bool:
    """Triton's boolean flag values: ``--allow-http=false``, ``--strict-model-config=1``..."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{value}'")
