"""What ``inferd health`` sends with each probe, over HTTP and over gRPC alike."""

from __future__ import annotations

import argparse


def request_headers(args: argparse.Namespace) -> dict[str, str]:
    """The headers every probe sends: the API key's ``Authorization`` and each ``--header NAME:VALUE``."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    for header in args.header:
        name, _, value = header.partition(":")
        headers[name.strip()] = value.strip()
    return headers
