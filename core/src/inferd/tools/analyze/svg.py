"""A small inline SVG line chart, for reports written without matplotlib."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

Series = tuple[str, Sequence[tuple[float, float]]]
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering ``[lo, hi]``."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int(math.ceil((hi - start) / step)) + 1)]


def line_chart(
    series: Sequence[Series], title: str, x_label: str, y_label: str, width: int = 720, height: int = 420
) -> str:
    """An ``<svg>`` element: one polyline with markers per series, axes with ticks, a legend."""
    points = [p for _, pts in series for p in pts]
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="60"><text x="10" y="30">no data</text></svg>'
    xt = _ticks(0.0, max(x for x, _ in points))
    yt = _ticks(0.0, max(y for _, y in points))
    left, right, top, bottom = 70, 190, 40, 50
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - xt[0]) / (xt[-1] - xt[0]) * pw

    def sy(y: float) -> float:
        return top + ph - (y - yt[0]) / (yt[-1] - yt[0]) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<text x="{left + pw / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>']  # fmt: skip
    for x in xt:
        out.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{top + ph}" stroke="#eee"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{x:g}</text>')
    for y in yt:
        out.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{left + pw}" y2="{sy(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text transform="translate(16,{top + ph / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, (label, pts) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in pts]
        ly = top + 14 + i * 18
        out.append(f'<rect x="{left + pw + 12}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{left + pw + 30}" y="{ly + 1}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)
