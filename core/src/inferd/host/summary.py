"""What the server says once it is ready: one block with the models and their states (Triton's
table), each endpoint as a URL, and which access rules and model control are on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from inferd.host.logging_settings import escape_controls
from inferd.lifecycle.manager import ControlMode

if TYPE_CHECKING:
    from inferd.auth import AccessControl
    from inferd.contracts.frontend import Frontend
    from inferd.repository.scan import Repository

#: Longest reason shown in the start-up table (the repository index has it whole).
_REASON_CHARS = 100


def ascii_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows in Triton's box layout (``+---+`` rules, ``| cell |`` lines); a cell's control characters
    are escaped (a model's name comes from a directory's), so each row is one line."""
    rows = [[escape_controls(c) for c in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([rule, line(headers), rule, *(line(r) for r in rows), rule])


def model_rows(index: list[dict[str, str]]) -> list[list[str]]:
    """Model, version and status per repository-index row; the status carries a short reason."""
    rows = []
    for row in index:
        state = row.get("state", "")
        reason = " ".join(row.get("reason", "").split())
        if len(reason) > _REASON_CHARS:
            reason = reason[: _REASON_CHARS - 3] + "..."
        status = f"{state}: {reason}" if state and reason else state or "not loaded"
        rows.append([row["name"], row.get("version", ""), status])
    return rows


def startup_summary(
    index: list[dict[str, str]],
    frontends: Sequence[Frontend],
    access: AccessControl | None,
    mode: ControlMode,
    repositories: Sequence[Repository],
    poll_secs: float,
    workers: str = "",
    on_demand: str = "",
) -> str:
    """The block logged after ``inferd ready`` (as a ``logging_settings.BLOCK``: no line break but
    its own): the repository index as Triton's table, each frontend's URL, the access rules, and
    the status page, the model control mode with what poll mode watches, and the serving
    processes (``workers``)."""
    lines = [ascii_table(("Model", "Version", "Status"), model_rows(index) or [["(none)", "", ""]])]
    lines.extend(_labelled(f.name, f.url()) for f in frontends if f.serving())
    pages = [f.status_page() for f in frontends if f.serving() and f.status_page()]
    if pages:  # the first frontend's (HTTP's, the OpenAI port's where it serves alone)
        lines.append(_labelled("status page", pages[0]))
    lines.extend(_access(access))
    if mode is ControlMode.POLL:
        watched = ", ".join(str(getattr(r, "url", r)) for r in repositories)
        lines.append(_labelled("model control", f"poll on, watching {watched} (rescan every {poll_secs:g} s)"))
    else:
        lines.append(_labelled("model control", f"{mode.value} (poll off)"))
    if on_demand:
        lines.append(_labelled("load on demand", on_demand))
    if workers:
        lines.append(_labelled("workers", workers))
    return "\n".join(lines)


def _labelled(label: str, text: str) -> str:
    return f"{label + ' ':.<24} {escape_controls(text)}"


def _access(access: AccessControl | None) -> list[str]:
    if access is None:
        return [_labelled("access", "open: no API keys (--auth-config), no restricted API groups")]
    lines = []
    if access.keys is not None:
        tenants = sorted(access.keys.current().tenants)
        lines.append(
            _labelled("API keys", f"on: {len(tenants)} tenant(s) ({', '.join(tenants)}) from {access.keys.path}")
        )
    else:
        lines.append(_labelled("API keys", "off"))
    for proto, policy in (("HTTP", access.http), ("gRPC", access.grpc)):
        groups = ", ".join(sorted(g.value for g in policy.restricted)) or "none"
        lines.append(_labelled(f"restricted groups {proto}", groups))
    return lines
