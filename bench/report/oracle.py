"""The credit ceiling in a credit probe's records: each method's per-update effect as a share of its twin's
oracle's (bench.engine.oracle: the twin's credit moved onto the Monte-Carlo step advantages), and each
label's credit against those true advantages (bench.engine.credit_quality) beside its effect.

For a credit method M with twin C and the twin's oracle O at a setting, over the batches all three updated
on (the oracle arms may sit out some: ``oracle_batches``), each trajectory t gives (the mean over its
checkpoints of their batch means, bench.paired.stats.per_trajectory)

    m_t = dJ_M - dJ_C        o_t = dJ_O - dJ_C        share = mean(m_t) / mean(o_t)

and the share's interval is Fieller's (bench.stats.ratio) at the Student-t quantile on T - 1 df,
Bonferroni over every share the report prints (a fixed-design interval over the trajectories all three
hold). No share is printed where the oracle's own gain over the twin is not resolved above 0 at that
critical value: a ceiling that may be 0 or below bounds nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from bench.paired.stats import Unit, index, per_trajectory, settings, stratum_mean
from bench.script import md_table
from bench.stats.ratio import fieller

QUALITY = ("quality_rank_corr", "quality_worst_share", "quality_worst_uniform", "quality_best_share",
           "quality_best_uniform")  # fmt: skip
"""The credit-quality fields of a probe record (bench.paired.update.blame_alignment)."""


def _triples(plan: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(method, twin, oracle) for each credit method whose twin has an oracle in the plan."""
    oracle_of = {p["control"]: p["method"] for p in plan["pairs"] if p["kind"] == "oracle"}
    return [(p["method"], p["control"], oracle_of[p["control"]]) for p in plan["pairs"]
            if p["kind"] == "twin" and p["control"] in oracle_of]  # fmt: skip


def shares(probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Each credit method's share of its twin's oracle's effect at each setting, with Fieller's interval
    (the module docstring); [] for a probe without oracle arms."""
    plan = probe["plan"]
    triples = _triples(plan)
    if not triples:
        return []
    order = list(plan["options"]["reference_seeds"])
    dj = index(probe["updates"], "dj")
    cells = []
    for setting, rate in settings({**plan, "pairs": [p for p in plan["pairs"] if p["kind"] != "placebo"]}):
        for m, c, o in triples:
            a, b, k = (m, rate.get(m)), (c, rate.get(c)), (o, rate.get(o))
            units = sorted(set(dj[a]) & set(dj[b]) & set(dj[k]))
            x = per_trajectory({u: dj[a][u] - dj[b][u] for u in units}, order)
            y = per_trajectory({u: dj[k][u] - dj[b][u] for u in units}, order)
            cells.append((setting, m, c, o, a[1], units, np.array(list(x.values())), np.array(list(y.values()))))
    tests = sum(1 for cell in cells if len(cell[6]) >= 3)
    alpha = plan["options"]["alpha"]
    out = []
    for setting, m, c, o, lr, units, x, y in cells:
        row = {"setting": setting, "method": m, "twin": c, "oracle": o, "lr": lr, "n": len(x),
               "batches": len(units), "method_effect": float(x.mean()) if len(x) else math.nan,
               "oracle_effect": float(y.mean()) if len(y) else math.nan, "share": None}  # fmt: skip
        if len(x) >= 3:
            q = float(stats.t.ppf(1 - alpha / (2 * tests), len(x) - 1))
            r = fieller(x, y, q)
            half = q * float(np.std(y, ddof=1)) / math.sqrt(len(y))
            row |= {"critical": q, "oracle_lo": row["oracle_effect"] - half, "oracle_hi": row["oracle_effect"] + half}
            if r is not None and row["oracle_effect"] > 0:
                row["share"] = {"mean": r.estimate, "lo": r.lo, "hi": r.hi}
        out.append(row)
    return out


def quality(probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Each label's credit against the true advantages (the mean over checkpoints of the batches' scores,
    on the batches that hold them) beside its mean gain in J per update at each rate; [] without them."""
    out = []
    for (label, lr), values in sorted(index(probe["updates"], "dj").items()):
        rs = [r for r in probe["updates"] if r["label"] == label and r["lr"] == lr]
        scored = [r for r in rs if r.get("quality_rank_corr") is not None or r.get("quality_worst_share") is not None]
        if not scored:
            continue
        row: dict[str, Any] = {"label": label, "lr": lr, "dj": stratum_mean(values), "batches": len(scored)}
        for key in QUALITY:
            kept = {Unit.of(r): r[key] for r in scored if r.get(key) is not None}
            row[key.removeprefix("quality_")] = stratum_mean(kept) if kept else None
        out.append(row)
    return out


def label_quality(reports: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    """``label``'s credit-quality scores from the first report that holds them (they do not depend on the rate)."""
    for rep in reports:
        rows = [q for q in rep.get("quality") or [] if q["label"] == label]
        if rows:
            return {k: rows[0][k] for k in ("rank_corr", "worst_share", "worst_uniform", "best_share", "best_uniform")}
    return None


def correlation(x: list[float], y: list[float], level: float = 0.95) -> dict[str, float] | None:
    """Pearson's r of the points with its Fisher-z interval (n >= 4), None with fewer: how credit quality
    relates to the per-update effect across methods (each method one point)."""
    if len(x) < 4 or np.std(x) == 0 or np.std(y) == 0:
        return None
    r = float(np.corrcoef(x, y)[0, 1])
    z, half = (
        math.atanh(max(min(r, 0.999999), -0.999999)),
        float(stats.norm.ppf(0.5 + level / 2)) / math.sqrt(len(x) - 3),
    )
    return {"r": r, "lo": math.tanh(z - half), "hi": math.tanh(z + half), "n": len(x)}


def quality_figure(q: dict[str, Any], path) -> None:
    """The scatter of :func:`across`'s points at one size: each method's per-update
    effect over its twin (its interval as a bar) against its credit's rank correlation with the true
    advantages, Pearson's r with its interval in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in q["points"] if p["rank_corr"] is not None]
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for p in points:
        ax.errorbar(p["rank_corr"], p["effect"], yerr=[[p["effect"] - p["lo"]], [p["hi"] - p["effect"]]],
                    fmt="o", color="C0", ecolor="0.6", capsize=2)  # fmt: skip
        ax.annotate(p["label"], (p["rank_corr"], p["effect"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("rank correlation of the credit with the Monte-Carlo step advantages")
    ax.set_ylabel("method - twin, dJ per update (points)")
    c = q.get("rank_corr")
    r = f"r = {c['r']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}], {c['n']} methods" if c else "too few methods for r"
    ax.set_title(f"credit quality and the update's effect at {q['size']}\n{r}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SCORES = ("rank_corr", "worst_excess")
ACROSS_LEVEL = 1 - 0.05 / len(SCORES)
"""The level of each score's interval across methods: 95% simultaneous over the two scores (Bonferroni)."""


def across(rows: list[dict[str, Any]], size: str, figure: str) -> dict[str, Any]:
    """Does credit that looks right make a better update? Each method at ``size`` with its credit-quality
    scores (label_quality) and its per-update effect over its twin (with its interval), and Pearson's
    r across methods of the effect with the rank correlation and with the worst step's excess share (over
    uniform's), each with its interval at ACROSS_LEVEL and the lowest r with one method left out (where
    one point carries it); ``figure``: the scatter's file name beside the table (quality_figure)."""
    points = []
    for r in rows:
        c = r["per_update"][size]
        q = (c or {}).get("quality")
        if q:
            excess = None if q["worst_share"] is None else q["worst_share"] - q["worst_uniform"]
            points.append({"label": r["label"], "effect": c["mean"], "lo": c["lo"], "hi": c["hi"],
                           "rank_corr": q["rank_corr"], "worst_excess": excess})  # fmt: skip
    out: dict[str, Any] = {"size": size, "points": points, "figure": figure}
    for key in SCORES:
        kept = [p for p in points if p[key] is not None]
        out[key] = correlation([p[key] for p in kept], [p["effect"] for p in kept], ACROSS_LEVEL)
        if out[key] is not None:  # the lowest r with one method left out: does one point carry it?
            drops = [(correlation([p[key] for p in kept if p is not d], [p["effect"] for p in kept if p is not d],
                                  ACROSS_LEVEL), d["label"]) for d in kept]  # fmt: skip
            low = min(((c["r"], label) for c, label in drops if c is not None), default=None)
            out[key]["without"] = None if low is None else {"r": low[0], "label": low[1]}
    return out


def across_text(q: dict[str, Any]) -> list[str]:
    """The credit-quality paragraph: each method's scores beside its effect and the correlations across methods."""
    if not q.get("points"):
        return []

    def r_text(name: str, c: dict[str, float] | None) -> str:
        if c is None:
            return f"{name}: too few methods for a correlation (4 needed)"
        text = f"{name}: r = {c['r']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}] over {c['n']} methods"
        low = c.get("without")
        return text + (f" (at least {low['r']:+.2f} with one left out, without `{low['label']}`)" if low else "")

    body = [[f"`{p['label']}`", f"{p['effect']:+.2f}", "–" if p["rank_corr"] is None else f"{p['rank_corr']:+.3f}",
             "–" if p["worst_excess"] is None else f"{p['worst_excess']:+.3f}"] for p in q["points"]]  # fmt: skip
    return [
        "",
        f"Credit against the true advantage at {q['size']} (the probe's batches that measure it): each method's "
        "per-update effect over its twin beside its credit's rank correlation with the Monte-Carlo step advantages "
        "and the excess share of a failed completion's negative credit on its worst step (over uniform credit's). "
        "Pearson's r across methods with its Fisher-z interval (95% simultaneous over the two scores, Bonferroni), "
        + r_text("rank correlation", q.get("rank_corr"))
        + "; "
        + r_text("worst-step excess", q.get("worst_excess"))
        + ".",
        "",
        *md_table(["method", "per update", "rank corr", "worst-step excess"], body, "lrrr"),
        "",
        f"![credit quality against the per-update effect at {q['size']}]({q['figure']})",
    ]
