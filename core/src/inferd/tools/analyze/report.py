"""report.html: throughput-vs-latency plot and a summary table of every measurement."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from html import escape
from types import ModuleType

from inferd.tools import plot
from inferd.tools.analyze.sweep import CandidateResult, Constraints, latency_ms
from inferd.tools.perf.options import PerfOptions
from inferd.tools.plot import Series

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th { background: #f3f3f3; } td.name { text-align: left; }
tr.fail td { color: #a33; } tr.best td { font-weight: bold; }
"""


def _series(ranked: Sequence[CandidateResult], percentile: int) -> list[Series]:
    out: list[Series] = []
    for c in ranked:
        for batch in sorted({m.batch_size for m in c.measurements}):
            pts = [
                (latency_ms(m.result, percentile), m.result.throughput)
                for m in sorted(c.measurements, key=lambda m: m.concurrency)
                if m.batch_size == batch
            ]
            label = c.candidate.name if batch == 1 else f"{c.candidate.name} (batch {batch})"
            out.append((label, pts))
    return out


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend, or a :class:`~inferd.tools.ToolError` naming the install."""
    return plot.pyplot("the inferd analyze report")


def plot_html(series: Sequence[Series], title: str, x_label: str, y_label: str) -> str:
    """An ``<img>`` with the chart (:func:`inferd.tools.plot.draw`'s style) inline as a PNG."""
    png = plot.figure([(series, title, x_label, y_label)], "the inferd analyze report")
    data = base64.b64encode(png).decode()
    return f'<img alt="{escape(title)}" src="data:image/png;base64,{data}"/>'


def _rows(ranked: Sequence[CandidateResult], constraints: Constraints, top_n: int) -> list[str]:
    p = constraints.latency_percentile
    rows = []
    for i, c in enumerate(ranked, start=1):
        cand, best = c.candidate, c.best
        delay = "-" if cand.queue_delay_us is None else str(cand.queue_delay_us)
        common = (
            f'<td class="name">{escape(cand.name)}</td><td>{cand.max_batch_size}</td><td>{cand.instances}</td>'
            f"<td>{'on' if cand.dynamic_batching else 'off'}</td><td>{delay}</td>"
            f"<td>{escape(','.join(map(str, cand.preferred)) or '-')}</td>"
        )
        if not c.measurements:
            rows.append(
                f'<tr class="fail"><td>{i}</td>{common}<td colspan="5">{escape(c.error or "not measured")}</td></tr>'
            )
            continue
        for m in c.measurements:
            cls = "best" if m is best and i <= top_n else ("" if m.meets else "fail")
            rows.append(
                f'<tr class="{cls}"><td>{i}</td>{common}<td>{m.batch_size}</td><td>{m.concurrency}</td>'
                f"<td>{m.result.throughput:.1f}</td><td>{latency_ms(m.result, p):.2f}</td>"
                f"<td>{'yes' if m.meets else 'no'}</td></tr>"
            )
    return rows


def render(
    model: str,
    opts: PerfOptions,
    ranked: Sequence[CandidateResult],
    constraints: Constraints,
    top_n: int,
    exported: Sequence[str],
) -> str:
    """The whole report as one self-contained HTML page."""
    p = constraints.latency_percentile
    limits = []
    if constraints.latency_budget_ms is not None:
        limits.append(f"p{p} latency &le; {constraints.latency_budget_ms:g} ms")
    if constraints.min_throughput is not None:
        limits.append(f"throughput &ge; {constraints.min_throughput:g} infer/sec")
    plot = plot_html(
        _series(ranked, p), f"{model}: throughput vs p{p} latency", f"p{p} latency (ms)", "throughput (infer/sec)"
    )
    head = (
        f"<th>rank</th><th>config</th><th>max_batch_size</th><th>instances</th><th>dynamic batching</th>"
        f"<th>queue delay (us)</th><th>preferred batch sizes</th><th>batch</th><th>concurrency</th>"
        f"<th>throughput (infer/sec)</th><th>p{p} latency (ms)</th><th>meets constraints</th>"
    )
    best = "".join(f"<li><code>{escape(e)}</code></li>" for e in exported) or "<li>none</li>"
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            f"<html><head><meta charset='utf-8'><title>inferd analyze: {escape(model)}</title>",
            f"<style>{_STYLE}</style></head><body>",
            f"<h1>inferd analyze: {escape(model)}</h1>",
            f"<p>{when}; server {escape(opts.url)} over {opts.protocol}; windows of {opts.measurement_interval_ms} ms; "
            f"constraints: {', '.join(limits) or 'none'}.</p>",
            plot,
            f"<h2>Best configurations</h2><ol>{best}</ol>",
            "<h2>Measurements</h2>",
            f"<table><thead><tr>{head}</tr></thead><tbody>",
            *_rows(ranked, constraints, top_n),
            "</tbody></table>",
            "</body></html>",
        ]
    )
