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
from typing import Any, NamedTuple

import numpy as np
from scipy import stats

from bench.stats import paired as summary


class Unit(NamedTuple):
    """One paired measurement of a credit probe: a batch drawn at a checkpoint of a reference trajectory
    (or a segment, at its step ``k``). Its fields are the record's keys in updates.json: "reference",
    "seed", "phase", "batch" (a segment record's "segment") and, for segments, "k"."""

    reference: str  # the label whose trajectory holds the checkpoint
    seed: int  # the trajectory's training seed
    phase: float  # the checkpoint's fraction of the budget
    batch: int  # the batch's index at the checkpoint (the segment's, for a segment record)
    k: int | None = None  # the step within a segment; None for a single update

    @classmethod
    def of(cls, record: dict[str, Any]) -> Unit:
        return cls(record["reference"], record["seed"], record["phase"], record.get("batch", record.get("segment")),
                   record.get("k"))  # fmt: skip

    @property
    def checkpoint(self) -> tuple[str, int, float]:
        """(reference, seed, phase): the stratum, as bench.paired.trajectory.Checkpoint.key names it."""
        return self.reference, self.seed, self.phase


def _order(u: Unit) -> tuple:
    """A fixed order of units (a set of them iterates in an order that changes from process to process)."""
    return (*u.checkpoint, u.batch, -1 if u.k is None else u.k)


def index(records: list[dict[str, Any]], value: str) -> dict[tuple, dict[Unit, float]]:
    """(label, lr) -> {unit: the record's ``value``}."""
    out: dict[tuple, dict[Unit, float]] = defaultdict(dict)
    for r in records:
        out[(r["label"], r["lr"])][Unit.of(r)] = r[value]
    return out


def by_checkpoint(values: dict[Unit, float]) -> dict[tuple, list[float]]:
    """The values grouped by checkpoint (the strata), in the units' order."""
    strata: dict[tuple, list[float]] = defaultdict(list)
    for unit, v in values.items():
        strata[unit.checkpoint].append(v)
    return strata


def stratum_mean(values: dict[Unit, float]) -> float:
    """The mean over strata (checkpoints) of each stratum's mean: every checkpoint weighs the same however
    many batches it holds."""
    return float(np.mean([np.mean(v) for v in by_checkpoint(values).values()]))


def stratified(diffs: dict[Unit, float], level: float = 0.95) -> dict[str, Any]:
    """The mean over strata (checkpoints) of each stratum's mean, with its standard error, Student-t
    interval, p-value and degrees of freedom (bench.stats.paired.stratified)."""
    strata = by_checkpoint(diffs)
    s = summary.stratified(strata)
    half = s.half(level)
    return {"mean": s.mean, "se": s.se, "lo": s.mean - half, "hi": s.mean + half, "p": s.p(), "df": s.df,
            "n": s.n, "checkpoints": len(strata)}  # fmt: skip


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
        have[unit.checkpoint] += 1
    need = dict(have)
    for _, rate in settings(probe["plan"]):
        for p in probe["plan"]["pairs"]:
            m, c = (p["method"], rate[p["method"]]), (p["control"], rate[p["control"]])
            units = sorted(set(dj[m]) & set(dj[c]), key=_order)  # a set's order moves with the hash seed
            by = by_checkpoint({u: dj[m][u] - dj[c][u] for u in units})
            gain = abs(stratum_mean({u: dj[c][u] for u in units})) if units else 0.0
            if not by or gain == 0 or any(len(v) < 2 for v in by.values()):
                continue
            sd = {k: float(np.std(v, ddof=1)) for k, v in by.items()}
            t = float(stats.t.ppf(0.975, sum(len(v) - 1 for v in by.values())))
            scale = (t / (target * gain * len(by))) ** 2 * sum(sd.values())
            for k, s in sd.items():
                need[k] = min(cap, max(need[k], math.ceil(s * scale)))
    return need
