"""The statistical reproduction check: does a rerun of a sweep on another numerics stack (another
CPU code path, library version, or a GPU) tell the same story as the committed report?

Two runs of one design on different numerics are two replicates of one experiment: every number moves,
but each estimate should differ from its committed value by no more than sampling allows. The rule
(docs/reproducibility.md), at family-wise level ``alpha`` over all the quantities it tests:

1. No directional verdict reverses: a label "better" than the baseline in one report and "worse" in
   the other fails outright, whatever the intervals say.
2. Each comparison's difference to its baseline agrees:
   ``|d_committed - d_fresh| <= z * sqrt(se_committed^2 + se_fresh^2)``, with the standard errors of
   the reports' own analysis (method x seed model) and ``z = Phi^-1(1 - alpha / (2 m))`` (Bonferroni
   over the m quantities tested).
3. Each row's mean final and base pass@1 agree the same way, with the standard error over seeds.
4. The two reports have the same comparisons and rows (a missing one fails).

This is an equivalence at a stated margin (each line prints its margin), not a test of "no
difference" that cannot fail: a reversed verdict, a shifted effect or a different base fails it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from scipy.stats import norm

DIRECTIONS = ("better", "worse")


@dataclass
class Agreement:
    ok: bool
    z: float
    lines: list[str] = field(default_factory=list)
    """One line per quantity: what was compared, the two values, the margin, agree or not."""


def _comparisons(report: dict[str, Any]) -> dict[tuple, dict]:
    rows = ((report.get("analysis") or {}).get("assessment") or {}).get("rows") or []
    return {(r["label"], r["task"], r["metric"]): r for r in rows}


def _rows(report: dict[str, Any]) -> dict[tuple, dict]:
    return {(r["method"], r["model"], r["task"], r["eval_task"]): r for r in report.get("rows", [])}


def _se(values: list[float | None]) -> float:
    xs = [v for v in values if v is not None]
    if len(xs) < 2:
        return math.nan
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1) / len(xs))


def agreement(committed: dict[str, Any], fresh: dict[str, Any], alpha: float = 0.05) -> Agreement:
    """Check ``fresh`` against ``committed`` by the rule above."""
    lines: list[str] = []
    ok = True
    cc, fc = _comparisons(committed), _comparisons(fresh)
    cr, fr = _rows(committed), _rows(fresh)
    for what, a, b in (("comparison", cc, fc), ("row", cr, fr)):
        for key in sorted(set(a) ^ set(b), key=str):
            ok = False
            where = "committed" if key in a else "fresh"
            lines.append(f"{what} {' / '.join(map(str, key))}: only in the {where} report")
    shared_c = sorted(set(cc) & set(fc), key=str)
    shared_r = sorted(set(cr) & set(fr), key=str)
    quantities = [("diff", k) for k in shared_c] + [(m, k) for k in shared_r for m in ("pass_at_1", "base_pass_at_1")]
    m = max(1, len(quantities))
    z = float(norm.ppf(1 - alpha / (2 * m)))
    for key in shared_c:
        c, f = cc[key], fc[key]
        name = f"{key[0]} vs baseline on {key[1]} ({key[2]})"
        vc, vf = c.get("verdict", ""), f.get("verdict", "")
        if vc in DIRECTIONS and vf in DIRECTIONS and vc != vf:
            ok = False
            lines.append(f"{name}: verdict reversed ({vc} committed, {vf} fresh)")
        d1, d2 = c["diff"]["value"], f["diff"]["value"]
        margin = z * math.hypot(c["diff"]["se"], f["diff"]["se"])
        agree = abs(d1 - d2) <= margin
        ok &= agree
        lines.append(
            f"{name}: difference {d1:+.4f} committed, {d2:+.4f} fresh; |gap| {abs(d1 - d2):.4f} "
            f"{'<=' if agree else '>'} margin {margin:.4f}: {'agrees' if agree else 'DISAGREES'} ({vc} / {vf})"
        )
    for key in shared_r:
        for metric in ("pass_at_1", "base_pass_at_1"):
            c, f = cr[key]["metrics"].get(metric), fr[key]["metrics"].get(metric)
            if not c or not f:
                continue
            se = math.hypot(_se(c["values"]), _se(f["values"]))
            gap = abs(c["mean"] - f["mean"])
            if gap == 0:
                agree, margin = True, 0.0  # identical (the same pinned base and eval) needs no spread
            elif not math.isfinite(se):  # a row of one seed has no spread to judge a gap by
                ok = False
                lines.append(f"{key[0]} on {key[3]} ({key[1]}) {metric}: differs with fewer than 2 seeds: DISAGREES")
                continue
            else:
                margin = z * se
                agree = gap <= margin
            ok &= agree
            lines.append(
                f"{key[0]} on {key[3]} ({key[1]}) {metric}: {c['mean']:.4f} committed, {f['mean']:.4f} fresh; "
                f"|gap| {gap:.4f} {'<=' if agree else '>'} margin {margin:.4f}: {'agrees' if agree else 'DISAGREES'}"
            )
    return Agreement(ok, z, lines)
