"""The sweep report's line and error-bar figures, one eval task at a time: eval pass@1 against
training samples or tokens, final pass@k against k, and final pass@1 against model size. Every
figure but the last has one panel per model, ordered by size.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report.plots.common import STYLE, LineStyle, finite, mpl, num, save


def _stat(metrics: dict, key: str) -> tuple[float, float, float]:
    """(mean, lo, hi) of one metric summary; NaN where missing."""
    m = metrics.get(key) or {}
    if not isinstance(m, dict):
        return num(m), math.nan, math.nan
    return num(m.get("mean")), num(m.get("lo")), num(m.get("hi"))


def _human(x: float) -> str:
    """4096 -> '4.1k', 529856 -> '530k', 1.99e6 -> '2M'."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def _models(rows: Sequence[dict]) -> list[tuple[str, float]]:
    """(model, params) ordered by size (models without a parameter count last, by name)."""
    params: dict[str, float] = {}
    for r in rows:
        p = num(r.get("params"))
        if str(r.get("model")) not in params or not finite(params[str(r.get("model"))]):
            params[str(r.get("model"))] = p
    return sorted(params.items(), key=lambda kv: (not finite(kv[1]), kv[1] if finite(kv[1]) else 0, kv[0]))


# ---------------------------------------------------------------------------- figure helpers


def _panels(plt, n: int, width: float = 3.7, height: float = 2.9):
    """A figure with n panels (up to 4 in a row), sharing y; returns (fig, list of axes)."""
    ncols = min(n, 4) if n <= 4 else 3
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(width * ncols + 1.8, height * nrows + 0.6),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
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
    return save(fig, plt, path)


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
    extra = f" ({_human(params)} params)" if finite(params) else ""
    ax.set_title(f"{model}{extra}", parse_math=False)


def _seeds_note(rows: Sequence[dict]) -> str:
    ns = sorted({len(r.get("seeds") or []) for r in rows} - {0})
    if not ns:
        return "mean over seeds"
    n = str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    return f"mean over {n} seed{'s' if ns[-1] != 1 else ''}"


def _dodge(i: int, m: int, step: float = 0.035) -> float:
    """Multiplicative offset on a log axis so error bars of m methods do not sit on each other."""
    return 2 ** (step * (i - (m - 1) / 2)) if m > 1 else 1.0


# ---------------------------------------------------------------------------- the plots


BANDS_UP_TO = 4
"""Curves get their 95% band (clipped to [0, 1]) when a panel has at most this many methods; with
more, only the baseline's band is drawn, so the lines stay readable."""


def plot_curves(report: dict, rows: list[dict], eval_task: str, xkey: str, path: Path, st: LineStyle) -> Path | None:
    """Eval pass@1 against training samples or tokens, one panel per model."""
    _, plt = mpl()
    models = _models(rows)
    drawn = False
    with plt.rc_context(STYLE):
        fig, axes = _panels(plt, len(models))
        for ax, (model, params) in zip(axes, models):
            mrows = st.order(r for r in rows if str(r.get("model")) == model)
            for r in mrows:
                c = r.get("curve") or {}
                cols = [[num(v) for v in (c.get(k) or [])] for k in (xkey, "pass_at_1", "pass_at_1_lo", "pass_at_1_hi")]
                n = min(len(cols[0]), len(cols[1]))
                pts = sorted(
                    (
                        cols[0][i],
                        cols[1][i],
                        cols[2][i] if i < len(cols[2]) else math.nan,
                        cols[3][i] if i < len(cols[3]) else math.nan,
                    )
                    for i in range(n)
                    if finite(cols[0][i]) and finite(cols[1][i])
                )
                if not pts:
                    continue
                x, y, lo, hi = (list(v) for v in zip(*pts))
                kw = st.kw(r)
                ax.plot(x, y, label=st.name(r), marker="o", markersize=2.5, **kw)
                band = [(a, max(b, 0.0), min(d, 1.0)) for a, b, d in zip(x, lo, hi) if finite(b) and finite(d)]
                if len(band) > 1 and (len(mrows) <= BANDS_UP_TO or str(r.get("method")) == st.baseline):
                    bx, blo, bhi = zip(*band)
                    ax.fill_between(
                        bx,
                        blo,
                        bhi,
                        color=kw["color"],
                        alpha=0.12 if kw["zorder"] > 3 else 0.18,
                        linewidth=0,
                        zorder=kw["zorder"] - 2,
                    )
                drawn = True
            _target_line(ax, report, mrows, st)
            _model_title(ax, model, params)
            ax.set_xlabel("training samples (completions)" if xkey == "samples" else "generated training tokens")
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: _human(v)))
            ax.set_xlim(left=0)
        axes[0].set_ylabel(f"eval pass@1 on {eval_task}")
        most = max(len([r for r in rows if r.get("model") == m]) for m, _ in models)  # methods in a panel
        band_of = "" if most <= BANDS_UP_TO else " of " + st.baseline
        title = (
            f"{report.get('sweep', 'sweep')}: eval pass@1 on {eval_task} vs training "
            f"{'samples' if xkey == 'samples' else 'tokens'} ({_seeds_note(rows)}, band: 95% t-interval"
            f"{band_of})"
        )
        return _finish(fig, axes, plt, path, title, drawn)


def _target_line(ax, report: dict, mrows: list[dict], st: LineStyle) -> None:
    """The dotted level of the to-target cost's pass@1 (report.json rows' ``target_pass_at_1``)."""
    level = next((num(r.get("target_pass_at_1")) for r in mrows if finite(num(r.get("target_pass_at_1")))), math.nan)
    if not finite(level):
        return
    how = "final" if report.get("target_of") == "final" else "gain"
    ax.axhline(
        level,
        color="#888888",
        linestyle=(0, (1, 2)),
        linewidth=1.0,
        zorder=1,
        label=f"target: {num(report.get('target')):g} × {st.baseline}'s {how} (pass@1 {level:.3f})",
    )


def plot_pass_at_k(report: dict, rows: list[dict], eval_task: str, path: Path, st: LineStyle) -> Path | None:
    """Final pass@k against k, one panel per model, 95% t-interval error bars."""
    _, plt = mpl()
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
                pts = [p for p in pts if finite(p[1])]
                if not pts:
                    continue
                allks |= {p[0] for p in pts}
                off = _dodge(i, len(mrows))
                x = [p[0] * off for p in pts]
                y = [p[1] for p in pts]
                err = [
                    [max(p[1] - p[2], 0) if finite(p[2]) else 0 for p in pts],
                    [max(p[3] - p[1], 0) if finite(p[3]) else 0 for p in pts],
                ]
                ax.errorbar(
                    x,
                    y,
                    yerr=err,
                    label=st.name(r),
                    marker="o",
                    markersize=3.5,
                    capsize=2.5,
                    elinewidth=1.0,
                    **st.kw(r),
                )
                drawn = True
            _model_title(ax, model, params)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("k (samples per problem)")
        for ax in axes:
            if allks:
                ax.set_xticks(sorted(allks), [str(k) for k in sorted(allks)])
                ax.xaxis.set_minor_locator(plt.NullLocator())
        axes[0].set_ylabel(f"final pass@k on {eval_task}")
        title = (
            f"{report.get('sweep', 'sweep')}: final pass@k on {eval_task} ({_seeds_note(rows)}, bars: 95% t-interval)"
        )
        return _finish(fig, axes, plt, path, title, drawn)


def plot_final_vs_size(report: dict, rows: list[dict], eval_task: str, path: Path, st: LineStyle) -> Path | None:
    """Final pass@1 against model size (log x), one line per method."""
    _, plt = mpl()
    models = [(m, p) for m, p in _models(rows) if finite(p) and p > 0]
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
                    if finite(mean):
                        pts.append((params, mean, lo, hi))
            if not pts:
                continue
            off = _dodge(i, len(lines))
            err = [
                [max(p[1] - p[2], 0) if finite(p[2]) else 0 for p in pts],
                [max(p[3] - p[1], 0) if finite(p[3]) else 0 for p in pts],
            ]
            ax.errorbar(
                [p[0] * off for p in pts],
                [p[1] for p in pts],
                yerr=err,
                label=st.name(group[0]),
                marker="o",
                markersize=4,
                capsize=2.5,
                elinewidth=1.0,
                **st.kw(group[0]),
            )
            drawn = True
        base = []
        for model, params in models:
            vals = [_stat(r.get("metrics") or {}, "base_pass_at_1")[0] for r in rows if str(r.get("model")) == model]
            vals = [v for v in vals if finite(v)]
            if vals:
                base.append((params, sum(vals) / len(vals)))
        if base:
            ax.plot(
                *zip(*base),
                color="#888888",
                linestyle="--",
                linewidth=1.0,
                marker="s",
                markersize=3,
                zorder=1,
                label="base policy (step 0)",
            )
        ax.set_xscale("log")
        ax.set_xticks([p for _, p in models], [f"{m}\n{_human(p)}" for m, p in models])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        for t in ax.get_xticklabels():
            t.set_parse_math(False)
        lo_p, hi_p = models[0][1], models[-1][1]
        ax.set_xlim(lo_p / 1.6, hi_p * 1.6)
        ax.set_xlabel("model size (parameters, log scale)")
        ax.set_ylabel(f"final pass@1 on {eval_task}")
        ax.set_title(
            f"{report.get('sweep', 'sweep')}: final pass@1 on {eval_task} vs model size\n"
            f"({_seeds_note(rows)}, bars: 95% t-interval)",
            parse_math=False,
        )
        _legend(fig, [ax])
        if not drawn:
            plt.close(fig)
            return None
        return save(fig, plt, path)
