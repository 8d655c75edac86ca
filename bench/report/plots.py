"""The sweep report's figures (PNG, matplotlib Agg), drawn from results/<sweep>/report.json.

    python -m bench.report.plots results/<sweep>/report.json results/<sweep>/plots

``write_plots(report, out_dir)`` writes, per eval task (a ``_<eval_task>`` suffix only when the
report has more than one):

- ``pass1_vs_samples.png``: eval pass@1 against training samples, one panel per model (by size),
  one line per method label (mean over seeds, shaded 95% t-interval), the baseline in black;
- ``pass1_vs_tokens.png``: the same against generated training tokens;
- ``pass_at_k.png``: final pass@k against k, with 95% t-interval error bars;
- ``final_vs_size.png``: final pass@1 against the model's parameter count (log axis);

and ``credit_map_<model>.png`` for every model in ``report["credit_maps"]``: one fixed completion,
one row per method, each token coloured by that method's credit divided by its largest |credit|.

A method label keeps its colour in every figure; values that are missing or not finite are left
out of the plot they belong to. Text from the report is drawn literally (no mathtext).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DPI = 120
MAX_TOKENS = 96
"""Tokens shown in a credit map; longer completions are cut and end with '…'."""
TOKENS_PER_LINE = 48
"""Tokens per line of a credit map; longer completions wrap onto further lines."""
BASELINE_COLOR = "#000000"
STYLE = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "legend.fontsize": 8, "figure.titlesize": 11,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.3, "grid.linewidth": 0.6, "savefig.dpi": DPI, "figure.dpi": DPI,
}
LINESTYLES = ["-", "--", ":", "-."]


def _mpl():
    """matplotlib on the Agg backend (imported on first use: the rest of bench does not need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return matplotlib, plt


# ---------------------------------------------------------------------------- data helpers


def _num(x: Any) -> float:
    """A float, or NaN for None / non-numbers."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _finite(x: float) -> bool:
    return math.isfinite(x)


def _stat(metrics: dict, key: str) -> tuple[float, float, float]:
    """(mean, lo, hi) of one metric summary; NaN where missing."""
    m = metrics.get(key) or {}
    if not isinstance(m, dict):
        return _num(m), math.nan, math.nan
    return _num(m.get("mean")), _num(m.get("lo")), _num(m.get("hi"))


def _safe(name: str) -> str:
    """A file-name-safe version of a model or task name."""
    return re.sub(r"[^\w.-]+", "_", str(name)).strip("_") or "unnamed"


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _human(x: float) -> str:
    """4096 -> '4.1k', 529856 -> '530k', 1.99e6 -> '2M'."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def method_colors(labels: Iterable[str], baseline: str | None) -> dict[str, str]:
    """One colour per method label: black for the baseline, the others in sorted order from
    tab10 (grey left out, it reads as the baseline) then the light half of tab20."""
    matplotlib, _ = _mpl()
    tab10 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab10"].colors]
    tab20 = [matplotlib.colors.to_hex(c) for c in matplotlib.colormaps["tab20"].colors]
    palette = [c for i, c in enumerate(tab10) if i != 7] + [c for i, c in enumerate(tab20[1::2]) if i != 7]
    others = sorted({lab for lab in labels if lab != baseline})
    colors = {lab: palette[i % len(palette)] for i, lab in enumerate(others)}
    if baseline is not None:
        colors[baseline] = BASELINE_COLOR
    return colors


def _ordered_labels(labels: Iterable[str], baseline: str | None) -> list[str]:
    """Baseline first, then the rest sorted."""
    labels = set(labels)
    return ([baseline] if baseline in labels else []) + sorted(labels - {baseline})


def _models(rows: Sequence[dict]) -> list[tuple[str, float]]:
    """(model, params) ordered by size (models without a parameter count last, by name)."""
    params: dict[str, float] = {}
    for r in rows:
        p = _num(r.get("params"))
        if str(r.get("model")) not in params or not _finite(params[str(r.get("model"))]):
            params[str(r.get("model"))] = p
    return sorted(params.items(), key=lambda kv: (not _finite(kv[1]), kv[1] if _finite(kv[1]) else 0, kv[0]))


def _by_eval_task(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """Rows grouped by eval task, in order of first appearance."""
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(str(r.get("eval_task") or r.get("task") or "eval"), []).append(r)
    return out


class _Style:
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
        return {"color": self.colors.get(label, "#555555"), "linewidth": 2.4 if base else 1.5,
                "linestyle": ls, "zorder": 4 if base else 3}

    def order(self, rows: Iterable[dict]) -> list[dict]:
        """Rows with the baseline first, then by label and training task."""
        return sorted(rows, key=lambda r: (str(r.get("method")) != self.baseline, str(r.get("method")),
                                           self.tasks.index(str(r.get("task")))))


# ---------------------------------------------------------------------------- figure helpers


def _panels(plt, n: int, width: float = 3.7, height: float = 2.9):
    """A figure with n panels (up to 4 in a row), sharing y; returns (fig, list of axes)."""
    ncols = min(n, 4) if n <= 4 else 3
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 1.8, height * nrows + 0.6),
                             sharey=True, squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _finish(fig, axes, plt, path: Path, title: str, drawn: bool) -> Path | None:
    """Title, legend and save a figure of panels; close it unwritten when nothing was drawn."""
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 11)), parse_math=False)  # ~11 title chars/inch
    _legend(fig, axes)
    if not drawn:
        plt.close(fig)
        return None
    return _save(fig, plt, path)


def _legend(fig, axes) -> None:
    """One legend for the whole figure, entries in order of first appearance, at the right."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_"):
                handles.setdefault(lab, h)
    if handles:
        leg = fig.legend(list(handles.values()), list(handles), loc="outside right center", frameon=False)
        for t in leg.get_texts():
            t.set_parse_math(False)


def _model_title(ax, model: str, params: float) -> None:
    extra = f" ({_human(params)} params)" if _finite(params) else ""
    ax.set_title(f"{model}{extra}", parse_math=False)


def _seeds_note(rows: Sequence[dict]) -> str:
    ns = sorted({len(r.get("seeds") or []) for r in rows} - {0})
    if not ns:
        return "mean over seeds"
    n = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    return f"mean over {n} seed{'s' if ns[-1] != 1 else ''}"


def _save(fig, plt, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)
    return path


def _dodge(i: int, m: int, step: float = 0.035) -> float:
    """Multiplicative offset on a log axis so error bars of m methods do not sit on each other."""
    return 2 ** (step * (i - (m - 1) / 2)) if m > 1 else 1.0


# ---------------------------------------------------------------------------- the plots


BANDS_UP_TO = 4
"""Curves get their 95% band (clipped to [0, 1]) when a panel has at most this many methods; with
more, only the baseline's band is drawn, so the lines stay readable."""


def _plot_curves(report: dict, rows: list[dict], eval_task: str, xkey: str, path: Path, st: _Style) -> Path | None:
    """Eval pass@1 against training samples or tokens, one panel per model."""
    _, plt = _mpl()
    models = _models(rows)
    drawn = False
    with plt.rc_context(STYLE):
        fig, axes = _panels(plt, len(models))
        for ax, (model, params) in zip(axes, models):
            mrows = st.order(r for r in rows if str(r.get("model")) == model)
            for r in mrows:
                c = r.get("curve") or {}
                cols = [[_num(v) for v in (c.get(k) or [])] for k in (xkey, "pass_at_1", "pass_at_1_lo", "pass_at_1_hi")]
                n = min(len(cols[0]), len(cols[1]))
                pts = sorted((cols[0][i], cols[1][i], cols[2][i] if i < len(cols[2]) else math.nan,
                              cols[3][i] if i < len(cols[3]) else math.nan)
                             for i in range(n) if _finite(cols[0][i]) and _finite(cols[1][i]))
                if not pts:
                    continue
                x, y, lo, hi = (list(v) for v in zip(*pts))
                kw = st.kw(r)
                ax.plot(x, y, label=st.name(r), marker="o", markersize=2.5, **kw)
                band = [(a, max(b, 0.0), min(d, 1.0)) for a, b, d in zip(x, lo, hi) if _finite(b) and _finite(d)]
                if len(band) > 1 and (len(mrows) <= BANDS_UP_TO or str(r.get("method")) == st.baseline):
                    bx, blo, bhi = zip(*band)
                    ax.fill_between(bx, blo, bhi, color=kw["color"], alpha=0.12 if kw["zorder"] > 3 else 0.18,
                                    linewidth=0, zorder=kw["zorder"] - 2)
                drawn = True
            _target_line(ax, report, mrows, st)
            _model_title(ax, model, params)
            ax.set_xlabel("training samples (completions)" if xkey == "samples" else "generated training tokens")
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: _human(v)))
            ax.set_xlim(left=0)
        axes[0].set_ylabel(f"eval pass@1 on {eval_task}")
        title = (f"{report.get('sweep', 'sweep')}: eval pass@1 on {eval_task} vs training "
                 f"{'samples' if xkey == 'samples' else 'tokens'} ({_seeds_note(rows)}, band: 95% t-interval"
                 f"{'' if max(len([r for r in rows if r.get('model') == m]) for m, _ in models) <= BANDS_UP_TO else ' of ' + st.baseline})")
        return _finish(fig, axes, plt, path, title, drawn)


def _target_line(ax, report: dict, mrows: list[dict], st: _Style) -> None:
    """The dotted level of the to-target cost's pass@1 (report.json rows' ``target_pass_at_1``)."""
    level = next((_num(r.get("target_pass_at_1")) for r in mrows if _finite(_num(r.get("target_pass_at_1")))), math.nan)
    if not _finite(level):
        return
    how = "final" if report.get("target_of") == "final" else "gain"
    ax.axhline(level, color="#888888", linestyle=(0, (1, 2)), linewidth=1.0, zorder=1,
               label=f"target: {_num(report.get('target')):g} × {st.baseline}'s {how} (pass@1 {level:.3f})")


def _plot_pass_at_k(report: dict, rows: list[dict], eval_task: str, path: Path, st: _Style) -> Path | None:
    """Final pass@k against k, one panel per model, 95% t-interval error bars."""
    _, plt = _mpl()
    models = _models(rows)
    drawn = False
    allks: set[int] = set()
    with plt.rc_context(STYLE):
        fig, axes = _panels(plt, len(models))
        for ax, (model, params) in zip(axes, models):
            mrows = st.order(r for r in rows if str(r.get("model")) == model)
            for i, r in enumerate(mrows):
                metrics = r.get("metrics") or {}
                ks = sorted(int(m.group(1)) for key in metrics if (m := re.fullmatch(r"pass_at_(\d+)", key)))
                pts = [(k, *_stat(metrics, f"pass_at_{k}")) for k in ks]
                pts = [p for p in pts if _finite(p[1])]
                if not pts:
                    continue
                allks |= {p[0] for p in pts}
                off = _dodge(i, len(mrows))
                x = [p[0] * off for p in pts]
                y = [p[1] for p in pts]
                err = [[max(p[1] - p[2], 0) if _finite(p[2]) else 0 for p in pts],
                       [max(p[3] - p[1], 0) if _finite(p[3]) else 0 for p in pts]]
                ax.errorbar(x, y, yerr=err, label=st.name(r), marker="o", markersize=3.5, capsize=2.5,
                            elinewidth=1.0, **st.kw(r))
                drawn = True
            _model_title(ax, model, params)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k (samples per problem)")
        for ax in axes:
            if allks:
                ax.set_xticks(sorted(allks), [str(k) for k in sorted(allks)])
                ax.xaxis.set_minor_locator(plt.NullLocator())
        axes[0].set_ylabel(f"final pass@k on {eval_task}")
        title = (f"{report.get('sweep', 'sweep')}: final pass@k on {eval_task} ({_seeds_note(rows)}, "
                 f"bars: 95% t-interval)")
        return _finish(fig, axes, plt, path, title, drawn)


def _plot_final_vs_size(report: dict, rows: list[dict], eval_task: str, path: Path, st: _Style) -> Path | None:
    """Final pass@1 against model size (log x), one line per method."""
    _, plt = _mpl()
    models = [(m, p) for m, p in _models(rows) if _finite(p) and p > 0]
    if not models:
        return None
    lines: dict[tuple[str, str], list[dict]] = {}
    for r in st.order(rows):
        lines.setdefault((str(r.get("method")), str(r.get("task"))), []).append(r)
    drawn = False
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6.4, 3.9), layout="constrained")
        for i, group in enumerate(lines.values()):
            pts = []
            for model, params in models:
                r = next((r for r in group if str(r.get("model")) == model), None)
                if r is not None:
                    mean, lo, hi = _stat(r.get("metrics") or {}, "pass_at_1")
                    if _finite(mean):
                        pts.append((params, mean, lo, hi))
            if not pts:
                continue
            off = _dodge(i, len(lines))
            err = [[max(p[1] - p[2], 0) if _finite(p[2]) else 0 for p in pts],
                   [max(p[3] - p[1], 0) if _finite(p[3]) else 0 for p in pts]]
            ax.errorbar([p[0] * off for p in pts], [p[1] for p in pts], yerr=err, label=st.name(group[0]),
                        marker="o", markersize=4, capsize=2.5, elinewidth=1.0, **st.kw(group[0]))
            drawn = True
        base = []
        for model, params in models:
            vals = [_stat(r.get("metrics") or {}, "base_pass_at_1")[0] for r in rows if str(r.get("model")) == model]
            vals = [v for v in vals if _finite(v)]
            if vals:
                base.append((params, sum(vals) / len(vals)))
        if base:
            ax.plot(*zip(*base), color="#888888", linestyle="--", linewidth=1.0, marker="s", markersize=3,
                    zorder=1, label="base policy (step 0)")
        ax.set_xscale("log")
        ax.set_xticks([p for _, p in models], [f"{m}\n{_human(p)}" for m, p in models])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        for t in ax.get_xticklabels():
            t.set_parse_math(False)
        lo_p, hi_p = models[0][1], models[-1][1]
        ax.set_xlim(lo_p / 1.6, hi_p * 1.6)
        ax.set_xlabel("model size (parameters, log scale)")
        ax.set_ylabel(f"final pass@1 on {eval_task}")
        ax.set_title(f"{report.get('sweep', 'sweep')}: final pass@1 on {eval_task} vs model size\n"
                     f"({_seeds_note(rows)}, bars: 95% t-interval)", parse_math=False)
        _legend(fig, [ax])
        if not drawn:
            plt.close(fig)
            return None
        return _save(fig, plt, path)


# ---------------------------------------------------------------------------- credit maps


def _token_text(tok: str) -> tuple[str, bool]:
    """How a token is written in its box, and whether it is a stand-in (space, newline, special)."""
    special = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "": "∅"}
    if tok in special:
        return special[tok], True
    if m := re.fullmatch(r"<\|?([^<>|]+)\|?>", tok):
        return m.group(1), True
    return tok.replace("\n", "↵").replace("\t", "⇥"), False


def _plot_credit_map(model: str, cm: dict, st: _Style, path: Path) -> Path | None:
    """One completion, one row per method, tokens coloured by credit / the method's max |credit|."""
    matplotlib, plt = _mpl()
    from matplotlib.patches import Rectangle

    tokens = [str(t) for t in (cm.get("completion_tokens") or [])]
    methods = cm.get("methods") or {}
    rows: list[tuple[str, list[float], float]] = []
    for label in _ordered_labels(methods, st.baseline):
        vals = [_num(v) for v in (methods.get(label) or [])]
        finite = [abs(v) for v in vals if _finite(v)]
        if len(vals) != len(tokens) or not finite:
            continue
        rows.append((label, vals, max(finite)))
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
            seg = shown[s * per_line:(s + 1) * per_line]
            top = s * seg_rows
            for j in range(0, len(seg), 10):
                ax.text(j + 0.5, top - 0.55, str(s * per_line + j), ha="center", va="center", fontsize=6.5,
                        color="#777777")
            if s == 0:
                ax.text(per_line + 1 + 0.3, top - 0.55, "max |credit|", ha="left", va="center", fontsize=7.5,
                        color="#444444")
            for i, (label, vals, scale) in enumerate(rows):
                y = top + i
                color = st.colors.get(label, "#555555")
                ax.text(-0.6, y, label, ha="right", va="center", fontsize=8.5, parse_math=False,
                        fontweight="bold" if label == st.baseline else "normal")
                ax.add_patch(Rectangle((-0.45, y - 0.4), 0.22, 0.8, color=color, linewidth=0))
                for j, tok in enumerate(seg):
                    v = vals[s * per_line + j]
                    ok = _finite(v)
                    u = v / scale if ok and scale > 0 else 0.0
                    face = cmap(0.5 + 0.5 * u) if ok else "#d9d9d9"
                    ax.add_patch(Rectangle((j + 0.04, y - 0.42), 0.92, 0.84, facecolor=face,
                                           edgecolor="#bbbbbb", linewidth=0.3))
                    text, stand_in = _token_text(tok)
                    size = min(8.0, 27.0 / len(text[:6]))
                    fg = "white" if ok and abs(u) > 0.6 else ("#777777" if stand_in or not ok else "black")
                    ax.text(j + 0.5, y + 0.02, text[:6], ha="center", va="center", fontsize=size, color=fg,
                            parse_math=False, family="DejaVu Sans Mono")
                if s == segments - 1 and cut and i == n - 1:
                    ax.text(len(seg) + 0.5, y, "…", ha="center", va="center", fontsize=10, color="#444444")
                ax.text(per_line + 1 + 0.3, y, f"{scale:.2g}", ha="left", va="center", fontsize=8,
                        family="DejaVu Sans Mono")
        reward = _num(cm.get("reward"))
        shown_note = f"first {len(shown)} of {len(tokens)} tokens" if cut else f"{len(tokens)} tokens"
        fig.text(0.5, 1 - 0.22 / height, f"{model}: token credit on one completion "
                 f"(reward {reward:g}, {shown_note})" if _finite(reward) else
                 f"{model}: token credit on one completion ({shown_note})",
                 ha="center", va="center", fontsize=10.5, parse_math=False)
        fig.text(0.5, 1 - 0.52 / height, "prompt: " + _short(cm.get("prompt", ""), 110), ha="center",
                 va="center", fontsize=8, color="#444444", parse_math=False)
        cw = min(4.0, width - 1.0)
        cax = fig.add_axes(((width - cw) / 2 / width, 0.42 / height, cw / width, 0.12 / height))
        sm = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(-1, 1), cmap=cmap)
        cb = fig.colorbar(sm, cax=cax, orientation="horizontal", ticks=[-1, -0.5, 0, 0.5, 1])
        cb.outline.set_linewidth(0.4)
        cax.tick_params(labelsize=7, length=2)
        cax.set_title("credit ÷ the method's max |credit|   (blue > 0: reinforced,  red < 0: suppressed)",
                      fontsize=7.5, pad=3)
        return _save(fig, plt, path)


# ---------------------------------------------------------------------------- entry points


def write_plots(report: dict, out_dir: Path) -> list[Path]:
    """Write the report's figures into ``out_dir`` (created if needed); return the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    st = _Style(report)
    groups = _by_eval_task(report.get("rows") or [])
    written: list[Path | None] = []
    for eval_task, rows in groups.items():
        suffix = f"_{_safe(eval_task)}" if len(groups) > 1 else ""
        written.append(_plot_curves(report, rows, eval_task, "samples", out_dir / f"pass1_vs_samples{suffix}.png", st))
        written.append(_plot_curves(report, rows, eval_task, "tokens", out_dir / f"pass1_vs_tokens{suffix}.png", st))
        written.append(_plot_pass_at_k(report, rows, eval_task, out_dir / f"pass_at_k{suffix}.png", st))
        written.append(_plot_final_vs_size(report, rows, eval_task, out_dir / f"final_vs_size{suffix}.png", st))
    for model, cm in (report.get("credit_maps") or {}).items():
        written.append(_plot_credit_map(str(model), cm or {}, st, out_dir / f"credit_map_{_safe(model)}.png"))
    return [p for p in written if p is not None]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help="results/<sweep>/report.json")
    ap.add_argument("out_dir", type=Path, help="folder for the PNG files (created if needed)")
    a = ap.parse_args(argv)
    try:
        report = json.loads(a.report.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"plots: error: cannot read {a.report}: {e}") from None
    for path in write_plots(report, a.out_dir):
        print(path)


if __name__ == "__main__":
    main()
