"""The sweep report's credit maps: one fixed completion of report.json's ``credit_maps[model]``, one
row per method, each token coloured by that method's credit divided by its largest |credit|; the
blame token (``credit_maps[model]["blame"]``: where the answer first went wrong) outlined in red.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.report.plots.common import STYLE, LineStyle, finite, mpl, num, save

MAX_TOKENS = 96
"""Tokens shown in a credit map; longer completions are cut and end with '…'."""
TOKENS_PER_LINE = 48
"""Tokens per line of a credit map; longer completions wrap onto further lines."""
BLAME_COLOR = "#d62728"
"""The outline of the blame token (where the answer first went wrong)."""


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _ordered_labels(labels: Iterable[str], baseline: str | None) -> list[str]:
    """Baseline first, then the rest sorted."""
    labels = set(labels)
    return ([baseline] if baseline in labels else []) + sorted(labels - {baseline})


def _token_text(tok: str) -> tuple[str, bool]:
    """How a token is written in its box, and whether it is a stand-in (space, newline, special)."""
    special = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "": "∅"}
    if tok in special:
        return special[tok], True
    if m := re.fullmatch(r"<\|?([^<>|]+)\|?>", tok):
        return m.group(1), True
    return tok.replace("\n", "↵").replace("\t", "⇥"), False


@dataclass(frozen=True)
class _Grid:
    """Where a credit map's boxes sit: tokens per line, line blocks, and the figure's size in inches."""

    per_line: int
    segments: int
    rows: int
    label_cols: float
    scale_cols: float
    seg_rows: float
    width: float
    height: float
    title_h: float = 0.75
    cbar_h: float = 0.95


def _credit_rows(cm: dict, baseline: str | None, n_tokens: int) -> list[tuple[str, list[float], float]]:
    """(label, credit per token, max |credit|) for every method whose credit covers the completion."""
    methods = cm.get("methods") or {}
    rows: list[tuple[str, list[float], float]] = []
    for label in _ordered_labels(methods, baseline):
        vals = [num(v) for v in (methods.get(label) or [])]
        magnitudes = [abs(v) for v in vals if finite(v)]
        if len(vals) == n_tokens and magnitudes:
            rows.append((label, vals, max(magnitudes)))
    return rows


def _grid(n_shown: int, rows: list[tuple[str, list[float], float]]) -> _Grid:
    """The layout: at most TOKENS_PER_LINE boxes a line, each line block one row per method."""
    box_w, row_h = 0.26, 0.30  # inches per token, per method row
    per_line = min(n_shown, TOKENS_PER_LINE)
    segments = math.ceil(n_shown / per_line)
    n = len(rows)
    label_cols = max(len(lab) for lab, _, _ in rows) * 0.075 / box_w + 1.0
    scale_cols = 3.2
    seg_rows = n + 1.3  # methods + the token-index line and a gap
    width = (label_cols + per_line + 1 + scale_cols) * box_w + 0.3
    height = ((segments - 1) * seg_rows + n + 0.6) * row_h + 0.75 + 0.95
    return _Grid(per_line, segments, n, label_cols, scale_cols, seg_rows, width, height)


def _draw_header(ax, g: _Grid, s: int, top: float, seg: list[str]) -> None:
    """A line block's token indices (every tenth), and above the first block the scale's title."""
    for j in range(0, len(seg), 10):
        ax.text(j + 0.5, top - 0.55, str(s * g.per_line + j), ha="center", va="center", fontsize=6.5, color="#777777")
    if s == 0:
        ax.text(g.per_line + 1 + 0.3, top - 0.55, "max |credit|", ha="left", va="center", fontsize=7.5, color="#444444")


def _draw_token(ax, cmap, x: int, y: float, tok: str, v: float, scale: float, blamed: bool) -> None:
    """One token's box, coloured by its credit over the row's scale, with its text."""
    from matplotlib.patches import Rectangle

    ok = finite(v)
    u = v / scale if ok and scale > 0 else 0.0
    face = cmap(0.5 + 0.5 * u) if ok else "#d9d9d9"
    ax.add_patch(
        Rectangle(
            (x + 0.04, y - 0.42),
            0.92,
            0.84,
            facecolor=face,
            edgecolor=BLAME_COLOR if blamed else "#bbbbbb",
            linewidth=1.6 if blamed else 0.3,
            zorder=3 if blamed else 1,
        )
    )
    text, stand_in = _token_text(tok)
    size = min(8.0, 27.0 / len(text[:6]))
    fg = "white" if ok and abs(u) > 0.6 else ("#777777" if stand_in or not ok else "black")
    ax.text(
        x + 0.5,
        y + 0.02,
        text[:6],
        ha="center",
        va="center",
        fontsize=size,
        color=fg,
        parse_math=False,
        family="DejaVu Sans Mono",
    )


def _draw_row(ax, cmap, g: _Grid, s: int, y: float, seg: list[str], row, st: LineStyle, blame) -> None:
    """One method's row in one line block: its label and colour key, its tokens, its scale."""
    from matplotlib.patches import Rectangle

    label, vals, scale = row
    weight = "bold" if label == st.baseline else "normal"
    ax.text(-0.6, y, label, ha="right", va="center", fontsize=8.5, parse_math=False, fontweight=weight)
    ax.add_patch(Rectangle((-0.45, y - 0.4), 0.22, 0.8, color=st.colors.get(label, "#555555"), linewidth=0))
    for j, tok in enumerate(seg):
        at = s * g.per_line + j
        _draw_token(ax, cmap, j, y, tok, vals[at], scale, at == blame)


def _draw_titles(fig, g: _Grid, model: str, cm: dict, shown: int, total: int, blame) -> None:
    """The title (model, reward, what is shown, the blame token) and the prompt under it."""
    reward = num(cm.get("reward"))
    note = f"first {shown} of {total} tokens" if shown < total else f"{total} tokens"
    if isinstance(blame, int) and 0 <= blame < total:
        note += f"; red: token {blame}, the first wrong one"
    title = (
        f"{model}: token credit on one completion (reward {reward:g}, {note})"
        if finite(reward)
        else f"{model}: token credit on one completion ({note})"
    )
    fig.text(0.5, 1 - 0.22 / g.height, title, ha="center", va="center", fontsize=10.5, parse_math=False)
    prompt = "prompt: " + _short(cm.get("prompt", ""), 110)
    fig.text(0.5, 1 - 0.52 / g.height, prompt, ha="center", va="center", fontsize=8, color="#444444", parse_math=False)


def _draw_colorbar(fig, matplotlib, cmap, g: _Grid) -> None:
    """The shared colour scale: credit over the method's max |credit|, from -1 to 1."""
    cw = min(4.0, g.width - 1.0)
    cax = fig.add_axes(((g.width - cw) / 2 / g.width, 0.42 / g.height, cw / g.width, 0.12 / g.height))
    sm = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(-1, 1), cmap=cmap)
    cb = fig.colorbar(sm, cax=cax, orientation="horizontal", ticks=[-1, -0.5, 0, 0.5, 1])
    cb.outline.set_linewidth(0.4)
    cax.tick_params(labelsize=7, length=2)
    cax.set_title(
        "credit ÷ the method's max |credit|   (blue > 0: reinforced,  red < 0: suppressed)", fontsize=7.5, pad=3
    )


def plot_credit_map(model: str, cm: dict, st: LineStyle, path: Path) -> Path | None:
    """One completion, one row per method, tokens coloured by credit / the method's max |credit|."""
    matplotlib, plt = mpl()
    tokens = [str(t) for t in (cm.get("completion_tokens") or [])]
    blame = cm.get("blame")  # the index of the token where the answer first went wrong, or None
    rows = _credit_rows(cm, st.baseline, len(tokens))
    if not tokens or not rows:
        return None
    shown = tokens[:MAX_TOKENS]
    g = _grid(len(shown), rows)
    cmap = matplotlib.colormaps["RdBu"]
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(g.width, g.height))
        ax = fig.add_axes(
            (0.15 / g.width, g.cbar_h / g.height, 1 - 0.3 / g.width, 1 - (g.title_h + g.cbar_h) / g.height)
        )
        ax.set_xlim(-g.label_cols, g.per_line + 1 + g.scale_cols)
        ax.set_ylim((g.segments - 1) * g.seg_rows + g.rows - 0.4, -1.0)
        ax.axis("off")
        for s in range(g.segments):
            seg = shown[s * g.per_line : (s + 1) * g.per_line]
            top = s * g.seg_rows
            _draw_header(ax, g, s, top, seg)
            for i, row in enumerate(rows):
                y = top + i
                _draw_row(ax, cmap, g, s, y, seg, row, st, blame)
                if s == g.segments - 1 and len(tokens) > len(shown) and i == g.rows - 1:
                    ax.text(len(seg) + 0.5, y, "…", ha="center", va="center", fontsize=10, color="#444444")
                ax.text(
                    g.per_line + 1 + 0.3,
                    y,
                    f"{row[2]:.2g}",
                    ha="left",
                    va="center",
                    fontsize=8,
                    family="DejaVu Sans Mono",
                )
        _draw_titles(fig, g, model, cm, len(shown), len(tokens), blame)
        _draw_colorbar(fig, matplotlib, cmap, g)
        return save(fig, plt, path)
