"""The paired statistics of a credit probe's records, and how many batches each checkpoint needs.

A checkpoint is a stratum: for a pair at a setting, the effect pooled over C checkpoints is the mean of
the checkpoints' mean differences, with SE = sqrt(sum_c s_c^2 / n_c) / C (:func:`stratified`). To reach a
half-width h at Student-t quantile t with the fewest batches, checkpoint c needs n_c = s_c S (t / (h C))^2
batches with S = sum_c s_c (Neyman's allocation: n_c proportional to s_c), which :func:`allocation`
computes from a first round's variances (an internal pilot: the batch counts depend on the variances only,
never on the differences' signs, which leaves the t interval's coverage as it is to first order).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
from scipy import stats


def index(records: list[dict[str, Any]], value: str) -> dict[tuple, dict[tuple, float]]:
    """(label, lr) -> {(reference, seed, phase, batch or segment[, k]): value}."""
    out: dict[tuple, dict[tuple, float]] = defaultdict(dict)
    for r in records:
        unit = (r["reference"], r["seed"], r["phase"], r.get("batch", r.get("segment")))
        out[(r["label"], r["lr"])][unit + ((r["k"],) if "k" in r else ())] = r[value]
    return out


def stratum_mean(values: dict[tuple, float]) -> float:
    """The mean over strata (checkpoints) of each stratum's mean: every checkpoint weighs the same however
    many batches it holds."""
    strata: dict[tuple, list[float]] = defaultdict(list)
    for unit, v in values.items():
        strata[unit[:3]].append(v)
    return float(np.mean([np.mean(v) for v in strata.values()]))


def stratified(diffs: dict[tuple, float], level: float = 0.95) -> dict[str, Any]:
    """The mean over strata (a unit's first three fields: the checkpoint) of each stratum's mean, with its
    standard error, Student-t interval, p-value and degrees of freedom."""
    strata: dict[tuple, list[float]] = defaultdict(list)
    for unit, d in diffs.items():
        strata[unit[:3]].append(d)
    means = [float(np.mean(v)) for v in strata.values()]
    C = len(strata)
    var = sum(float(np.var(v, ddof=1)) / len(v) for v in strata.values() if len(v) > 1)
    df = sum(len(v) - 1 for v in strata.values())
    mean, se = float(np.mean(means)), math.sqrt(var) / C
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se if df > 0 else math.inf
    p = float(2 * stats.t.sf(abs(mean) / se, df)) if se > 0 and df > 0 else (1.0 if mean == 0 else 0.0)
    return {"mean": mean, "se": se, "lo": mean - half, "hi": mean + half, "p": p, "df": df, "n": len(diffs),
            "checkpoints": C}  # fmt: skip


def settings(plan: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(setting name, label -> its rate there): each common rate, then each label at its tuned rate."""
    labels = sorted({x for p in plan["pairs"] for x in (p["method"], p["control"])})
    out = [(f"lr {lr:g}", dict.fromkeys(labels, lr)) for lr in plan["options"]["lrs"]]
    if plan["tuned"] and all(x in plan["tuned"] for x in labels):
        out.append(("tuned", {x: plan["tuned"][x] for x in labels}))
    return out


def allocation(probe: dict[str, Any], target: float, cap: int) -> dict[tuple, int]:
    """Batches each checkpoint ``(reference, seed, phase)`` needs for every pair at every setting to reach
    a 95% half-width of ``target`` x the control's mean gain (at most ``cap``; at least what it has)."""
    dj = index(probe["updates"], "dj")
    have: dict[tuple, int] = defaultdict(int)
    for unit in {u for per in dj.values() for u in per}:
        have[unit[:3]] += 1
    need = dict(have)
    for _, rate in settings(probe["plan"]):
        for p in probe["plan"]["pairs"]:
            m, c = (p["method"], rate[p["method"]]), (p["control"], rate[p["control"]])
            units = set(dj[m]) & set(dj[c])
            by: dict[tuple, list[float]] = defaultdict(list)
            for u in units:
                by[u[:3]].append(dj[m][u] - dj[c][u])
            gain = abs(stratum_mean({u: dj[c][u] for u in units})) if units else 0.0
            if not by or gain == 0 or any(len(v) < 2 for v in by.values()):
                continue
            sd = {k: float(np.std(v, ddof=1)) for k, v in by.items()}
            t = float(stats.t.ppf(0.975, sum(len(v) - 1 for v in by.values())))
            scale = (t / (target * gain * len(by))) ** 2 * sum(sd.values())
            for k, s in sd.items():
                need[k] = min(cap, max(need[k], math.ceil(s * scale)))
    return need
