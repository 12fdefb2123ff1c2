"""The benchmark's rows and the one table they print as."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .load import Result


@dataclass(frozen=True)
class Case:
    """What one row measures."""

    model: str
    protocol: str
    batching: str  # "on", "off", or "-" for the null stacks
    server: str
    conc: int


@dataclass
class Row:
    """A case and its repeated results, or why it has none (``status``)."""

    case: Case
    results: list[Result] = field(default_factory=list)
    status: str = ""
    #: infer/s of each timed run, by round (``--rounds``).
    rounds: dict[int, list[float]] = field(default_factory=dict)

    def round_rate(self, index: int) -> float:
        """Median infer/s of one round's runs."""
        return statistics.median(self.rounds[index])

    @property
    def rate(self) -> float:
        """Median infer/s over the repeats."""
        return statistics.median(r.rate for r in self.results) if self.results else float("nan")

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats' infer/s, in percent."""
        rates = [r.rate for r in self.results]
        return 100.0 * (max(rates) - min(rates)) / self.rate if len(rates) > 1 and self.rate else float("nan")

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.results) if self.results else float("nan")

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.results)


HEADER = (
    "model",
    "protocol",
    "batching",
    "server/config",
    "c",
    "infer/s",
    "p50 ms",
    "p99 ms",
    "server CPU",
    "errors",
    "spread",
    "vs Triton",
)


def _triton_row(rows: list[Row], case: Case) -> Row | None:
    batching = "on" if case.batching == "-" else case.batching
    for row in rows:
        c = row.case
        if (c.server, c.model, c.protocol, c.batching, c.conc) == (
            "triton",
            case.model,
            case.protocol,
            batching,
            case.conc,
        ) and row.results:
            return row
    return None


def _ratio(row: Row, rows: list[Row]) -> str:
    """infer/s over Triton's: with several rounds, the median of the same-round ratios [their range]."""
    triton = _triton_row(rows, row.case)
    if triton is None:
        return "-"
    if triton is row:
        return "1.00x"
    common = sorted(set(row.rounds) & set(triton.rounds))
    if len(common) < 2:
        return f"{row.rate / triton.rate:.2f}x"
    ratios = [row.round_rate(k) / triton.round_rate(k) for k in common]
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"


def _cells(row: Row, rows: list[Row]) -> tuple[str, ...]:
    c = row.case
    head = (c.model, c.protocol, c.batching, c.server, str(c.conc))
    if not row.results:
        return (*head, row.status)
    spread = f"{row.spread:.0f}%" if row.spread == row.spread else "-"
    errors = str(row.errors) + (f" ({row.status})" if row.status else "")
    return (
        *head,
        f"{row.rate:,.0f}",
        f"{row.median('p50_ms'):.2f}",
        f"{row.median('p99_ms'):.2f}",
        f"{row.median('cpu_pct'):.0f}%",
        errors,
        spread,
        _ratio(row, rows),
    )


def render(rows: list[Row]) -> str:
    """The table, sorted by model, protocol, concurrency, batching; Triton first in each group.

    A row without results (not available, failed check) shows why in place of its numbers.
    """
    order = sorted(
        rows,
        key=lambda r: (
            r.case.model,
            r.case.protocol,
            r.case.conc,
            r.case.batching == "-",
            r.case.batching,
            r.case.server != "triton",
            r.case.server,
        ),
    )
    lines = [HEADER, *(_cells(r, rows) for r in order)]
    full = [line for line in lines if len(line) == len(HEADER)]
    widths = [max(len(line[i]) for line in (lines if i < 5 else full)) for i in range(len(HEADER))]

    def fmt(line: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(w) if i >= 4 and line is not HEADER else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=False))
        ]
        if len(line) < len(HEADER):
            cells[-1] = line[-1]
        return " | ".join(cells).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([fmt(HEADER), rule, *(fmt(line) for line in lines[1:])])


def noise_note(
    rows: list[Row], repeat: int, seconds: float, warmup: float, load: tuple[float, float], rounds: int = 1
) -> str:
    """How far to trust the table: repeats, rounds, the largest spread seen, the machine's load."""
    timed = [r for r in rows if r.results]
    runs = f"{repeat} run(s) of {seconds:g} s after a {warmup:g} s warm-up"
    if rounds > 1:
        runs = (
            f"{repeat * rounds} runs ({rounds} rounds of {runs}); vs Triton: the median of the {rounds} "
            f"same-round ratios [lowest-highest]"
        )
    lines = [
        f"noise: each row is the median of {runs}; 1-minute load average {load[0]:.2f} before, {load[1]:.2f} after."
    ]
    spreads = [(r.spread, r) for r in timed if r.spread == r.spread]
    if spreads:
        worst, row = max(spreads, key=lambda s: s[0])
        mid = statistics.median(s for s, _ in spreads)
        lines.append(
            f"spread (max-min)/median across all runs: median {mid:.0f}%, worst {worst:.0f}% "
            f"({row.case.server}, {row.case.model} {row.case.protocol} c={row.case.conc})."
        )
    else:
        lines.append("spread: not measured (one run per row; use --repeat 3 to see it).")
    lines.append(
        "The load generators share the cores with the server. Ratios within ~10% of 1.0 are a tie unless "
        "the spread is small; run on a quiet machine."
    )
    return "\n".join(lines)
