"""The tools' charts, one style for all: ``inferd analyze``'s report plot and ``inferd perf --plot``.

matplotlib (the ``tools`` extra) on its Agg backend, imported when a chart is drawn.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from inferd.tools import ToolError, require

#: One plotted line: its legend label and its (x, y) points.
Series = tuple[str, Sequence[tuple[float, float]]]
#: One chart of a figure: its series, title, x label and y label.
Panel = tuple[Sequence[Series], str, str, str]
#: The file types :func:`save` writes, by suffix.
FORMATS = ("png", "svg", "pdf")
#: The size of one chart in inches, and its resolution.
PANEL_SIZE = (8.0, 4.8)
DPI = 100


def pyplot(purpose: str) -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend, or a :class:`~inferd.tools.ToolError` naming the install."""
    require("matplotlib", purpose).use("Agg")
    return require("matplotlib.pyplot", purpose)


def draw(ax: Any, series: Sequence[Series], title: str, x_label: str, y_label: str) -> None:
    """One chart on ``ax``: a line with round markers per series, axes from 0, a light grid, a legend.

    Each line's SVG id (``gid``) is its label, so a drawn point can be found in an SVG file."""
    for label, pts in series:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label, gid=label)
    ax.set(title=title, xlabel=x_label, ylabel=y_label)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def figure(panels: Sequence[Panel], purpose: str, fmt: str = "png") -> bytes:
    """The charts of ``panels`` side by side, as the bytes of a ``fmt`` file (one of :data:`FORMATS`);
    SVG keeps its text as text (searchable, and what a test reads)."""
    plt = pyplot(purpose)
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, axes = plt.subplots(1, len(panels), figsize=(PANEL_SIZE[0] * len(panels), PANEL_SIZE[1]), dpi=DPI)
        try:
            for ax, panel in zip([axes] if len(panels) == 1 else axes, panels, strict=True):
                draw(ax, *panel)
            buf = io.BytesIO()
            fig.tight_layout()
            fig.savefig(buf, format=fmt)
        finally:
            plt.close(fig)
    return buf.getvalue()


def file_format(path: Path) -> str:
    """The format of the file ``path`` names by its suffix, or a :class:`~inferd.tools.ToolError`."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ToolError(f"--plot writes {', '.join('.' + f for f in FORMATS)} files, got '{path}'")
    return fmt
