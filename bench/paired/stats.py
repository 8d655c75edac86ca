"""The paired records of a credit probe, grouped by the units that were sampled.

A record is one arm's update on one batch (:class:`Unit`): batches are drawn at a checkpoint, the
checkpoints sit at fixed phases of a reference trajectory, and the trajectories are training seeds
added in rounds. For a pair at a setting, each trajectory's value is the mean over its checkpoints of
the checkpoint's mean difference (:func:`per_trajectory`), and the trajectories are the sampled units
of the inference (bench.stats.paired.nested); a phase's values across trajectories are its conditional
detail (where in training a credit helps).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from bench.stats import paired as summary
from bench.stats.paired import Summary


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


def by_trajectory(values: dict[Unit, float]) -> dict[tuple[str, int], dict[float, list[float]]]:
    """The values grouped by trajectory (reference, seed), then by phase (its checkpoints), in order."""
    out: dict[tuple[str, int], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for unit in sorted(values, key=_order):
        out[(unit.reference, unit.seed)][unit.phase].append(values[unit])
    return {t: dict(v) for t, v in out.items()}


def per_trajectory(values: dict[Unit, float], order: list[int]) -> dict[int, float]:
    """Each trajectory's value (the mean over its checkpoints of their means) by its seed, in the order of
    ``order`` (the seeds in the order the rounds added them; one pair's records hold one reference)."""
    groups = by_trajectory(values)
    rank = {s: i for i, s in enumerate(order)}
    keys = sorted(groups, key=lambda t: (rank.get(t[1], len(rank)), t))
    return {t[1]: float(np.mean([np.mean(v) for v in groups[t].values()])) for t in keys}


def nested(values: dict[Unit, float]) -> Summary:
    """The two-level summary of the values: trajectories as the sampled units (bench.stats.paired.nested)."""
    return summary.nested(by_trajectory(values))


def settings(plan: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """(setting name, label -> its rate there): each common rate, then each label at its tuned rate."""
    labels = sorted({x for p in plan["pairs"] for x in (p["method"], p["control"])})
    out = [(f"lr {lr:g}", dict.fromkeys(labels, lr)) for lr in plan["options"]["lrs"]]
    if plan["tuned"] and all(x in plan["tuned"] for x in labels):
        out.append(("tuned", {x: plan["tuned"][x] for x in labels}))
    return out
