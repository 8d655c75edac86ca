"""What every figure of the sweep report shares: matplotlib on Agg with one rc style, the reading of
report.json values (missing or non-finite ones become NaN and are left out), and one colour and line
style per method label, the same in every figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

DPI = 120
BASELINE_COLOR = "#000000"
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "savefig.dpi": DPI,
    "figure.dpi": DPI,
}
LINESTYLES = ["-", "--", ":", "-."]


def mpl():
    """matplotlib on the Agg backend (imported on first use: the rest of bench does not need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return matplotlib, plt


def num(x: Any) -> float:
    """A float, or NaN for None / non-numbers."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def finite(x: float) -> bool:
    return math.isfinite(x)


def method_colors(labels: Iterable[str], baseline: str | None) -> dict[str, str]:
    """One colour per method label: black for the baseline, the others in sorted order from
    tab10 (grey left out, it reads as the baseline) then the light half of tab20."""
    matplotlib, _ = mpl()
    tab10 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors]
    tab20 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab20"].colors]
    palette = [c for i, c in enumerate(tab10) if i != 7] + [c for i, c in enumerate(tab20[1::2]) if i != 7]
    others = sorted({lab for lab in labels if lab != baseline})
    colors = {lab: palette[i % len(palette)] for i, lab in enumerate(others)}
    if baseline is not None:
        colors[baseline] = BASELINE_COLOR
    return colors


class LineStyle:
    """Colour, line width and line style of a (method label, training task) line."""

    def __init__(self, report: dict):
        rows = report.get("rows") or []
        self.baseline = report.get("baseline")
        labels = {str(r.get("method")) for r in rows}
        for cm in (report.get("credit_maps") or {}).values():
            labels |= set((cm or {}).get("methods") or {})
        self.colors = method_colors(labels, self.baseline)
        self.tasks = list(dict.fromkeys(str(r.get("task")) for r in rows))

    def name(self, row: dict) -> str:
        label = str(row.get("method"))
        return label if len(self.tasks) <= 1 else f"{label} (trained on {row.get('task')})"

    def kw(self, row: dict) -> dict:
        label = str(row.get("method"))
        base = label == self.baseline
        ls = LINESTYLES[self.tasks.index(str(row.get("task"))) % len(LINESTYLES)] if len(self.tasks) > 1 else "-"
        return {
            "color": self.colors.get(label, "#555555"),
            "linewidth": 2.4 if base else 1.5,
            "linestyle": ls,
            "zorder": 4 if base else 3,
        }

    def order(self, rows: Iterable[dict]) -> list[dict]:
        """Rows with the baseline first, then by label and training task."""
        return sorted(
            rows,
            key=lambda r: (
                str(r.get("method")) != self.baseline,
                str(r.get("method")),
                self.tasks.index(str(r.get("task"))),
            ),
        )


def save(fig, plt, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)
    return path
