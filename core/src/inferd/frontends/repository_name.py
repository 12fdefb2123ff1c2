"""The repository extension's ``repository_name``, refused by the HTTP and gRPC frontends alike."""

from __future__ import annotations

from inferd.contracts.errors import Unsupported


def check_repository_name(name: str) -> None:
    """Refuse a repository named in a repository request (index, load, unload), as Triton does:
    the server's repositories are one namespace."""
    if name:
        raise Unsupported(
            f"'repository_name' specification is not supported (repository '{name}': "
            f"this server's repositories are one namespace; leave the name out)"
        )
