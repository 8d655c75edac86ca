"""The sweep report's credit maps: one fixed completion of report.json's ``credit_maps[model]``, one
row per method, each token coloured by that method's credit divided by its largest |credit|; the
blame token (``credit_maps[model]["blame"]``: where the answer first went wrong) outlined in red.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
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


def plot_credit_map(model: str, cm: dict, st: LineStyle, path: Path) -> Path | None:
    """One completion, one row per method, tokens coloured by credit / the method's max |credit|."""
    matplotlib, plt = mpl()
    from matplotlib.patches import Rectangle

    tokens = [str(t) for t in (cm.get("completion_tokens") or [])]
    blame = cm.get("blame")  # the index of the token where the answer first went wrong, or None
    methods = cm.get("methods") or {}
    rows: list[tuple[str, list[float], float]] = []
    for label in _ordered_labels(methods, st.baseline):
        vals = [num(v) for v in (methods.get(label) or [])]
        magnitudes = [abs(v) for v in vals if finite(v)]
        if len(vals) != len(tokens) or not magnitudes:
            continue
        rows.append((label, vals, max(magnitudes)))
    if not tokens or not rows:
        return None

    shown = tokens[:MAX_TOKENS]
    cut = len(tokens) > len(shown)
    per_line = min(len(shown), TOKENS_PER_LINE)
    segments = math.ceil(len(shown) / per_line)
    n = len(rows)
    box_w, row_h = 0.26, 0.30  # inches per token, per method row
    label_cols = max(len(lab) for lab, _, _ in rows) * 0.075 / box_w + 1.0
    scale_cols = 3.2
    seg_rows = n + 1.3  # methods + the token-index line and a gap
    width = (label_cols + per_line + 1 + scale_cols) * box_w + 0.3
    title_h, cbar_h = 0.75, 0.95
    height = ((segments - 1) * seg_rows + n + 0.6) * row_h + title_h + cbar_h

    cmap = matplotlib.colormaps["RdBu"]
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(width, height))
        ax = fig.add_axes((0.15 / width, cbar_h / height, 1 - 0.3 / width, 1 - (title_h + cbar_h) / height))
        ax.set_xlim(-label_cols, per_line + 1 + scale_cols)
        ax.set_ylim((segments - 1) * seg_rows + n - 0.4, -1.0)
        ax.axis("off")
        for s in range(segments):
            seg = shown[s * per_line : (s + 1) * per_line]
            top = s * seg_rows
            for j in range(0, len(seg), 10):
                ax.text(
                    j + 0.5, top - 0.55, str(s * per_line + j), ha="center", va="center", fontsize=6.5, color="#777777"
                )
            if s == 0:
                ax.text(
                    per_line + 1 + 0.3,
                    top - 0.55,
                    "max |credit|",
                    ha="left",
                    va="center",
                    fontsize=7.5,
                    color="#444444",
                )
            for i, (label, vals, scale) in enumerate(rows):
                y = top + i
                color = st.colors.get(label, "#555555")
                ax.text(
                    -0.6,
                    y,
                    label,
                    ha="right",
                    va="center",
                    fontsize=8.5,
                    parse_math=False,
                    fontweight="bold" if label == st.baseline else "normal",
                )
                ax.add_patch(Rectangle((-0.45, y - 0.4), 0.22, 0.8, color=color, linewidth=0))
                for j, tok in enumerate(seg):
                    v = vals[s * per_line + j]
                    ok = finite(v)
                    u = v / scale if ok and scale > 0 else 0.0
                    face = cmap(0.5 + 0.5 * u) if ok else "#d9d9d9"
                    blamed = s * per_line + j == blame
                    ax.add_patch(
                        Rectangle(
                            (j + 0.04, y - 0.42),
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
                        j + 0.5,
                        y + 0.02,
                        text[:6],
                        ha="center",
                        va="center",
                        fontsize=size,
                        color=fg,
                        parse_math=False,
                        family="DejaVu Sans Mono",
                    )
                if s == segments - 1 and cut and i == n - 1:
                    ax.text(len(seg) + 0.5, y, "…", ha="center", va="center", fontsize=10, color="#444444")
                ax.text(
                    per_line + 1 + 0.3, y, f"{scale:.2g}", ha="left", va="center", fontsize=8, family="DejaVu Sans Mono"
                )
        reward = num(cm.get("reward"))
        shown_note = f"first {len(shown)} of {len(tokens)} tokens" if cut else f"{len(tokens)} tokens"
        if isinstance(blame, int) and 0 <= blame < len(tokens):
            shown_note += f"; red: token {blame}, the first wrong one"
        fig.text(
            0.5,
            1 - 0.22 / height,
            f"{model}: token credit on one completion (reward {reward:g}, {shown_note})"
            if finite(reward)
            else f"{model}: token credit on one completion ({shown_note})",
            ha="center",
            va="center",
            fontsize=10.5,
            parse_math=False,
        )
        fig.text(
            0.5,
            1 - 0.52 / height,
            "prompt: " + _short(cm.get("prompt", ""), 110),
            ha="center",
            va="center",
            fontsize=8,
            color="#444444",
            parse_math=False,
        )
        cw = min(4.0, width - 1.0)
        cax = fig.add_axes(((width - cw) / 2 / width, 0.42 / height, cw / width, 0.12 / height))
        sm = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(-1, 1), cmap=cmap)
        cb = fig.colorbar(sm, cax=cax, orientation="horizontal", ticks=[-1, -0.5, 0, 0.5, 1])
        cb.outline.set_linewidth(0.4)
        cax.tick_params(labelsize=7, length=2)
        cax.set_title(
            "credit ÷ the method's max |credit|   (blue > 0: reinforced,  red < 0: suppressed)", fontsize=7.5, pad=3
        )
        return save(fig, plt, path)
