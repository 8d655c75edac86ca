"""bench.report.per_update: the probe's records read by unit, and the sweep's verdicts set beside them by pair."""

from __future__ import annotations

from bench.paired.stats import Unit, index
from bench.report.per_update import end_to_end


def test_records_are_read_by_unit():
    """An update record and a segment record (its index under "segment", its step k) give units whose
    checkpoint is (reference, seed, phase)."""
    update = {"reference": "r", "seed": 1, "phase": 0.5, "batch": 3, "label": "m", "lr": 1e-4, "dj": 2.0}
    segment = {"reference": "r", "seed": 1, "phase": 0.5, "segment": 0, "k": 2, "label": "m", "lr": 1e-4, "dj": 1.0}
    (u,) = index([update], "dj")[("m", 1e-4)]
    (s,) = index([segment], "dj")[("m", 1e-4)]
    assert u == Unit("r", 1, 0.5, 3) and u.k is None and u.checkpoint == ("r", 1, 0.5)
    assert (s.batch, s.k, s.checkpoint) == (0, 2, ("r", 1, 0.5))


def _comparison(task: str, control: str, method: str, diff: float) -> tuple[dict, dict]:
    comparison = {"task": task, "baseline": control, "diffs": {method: {}}}
    row = {"label": method, "task": task, "diff": {"value": diff, "lo": diff - 0.01, "hi": diff + 0.01},
           "p_holm": 0.5, "verdict": "inconclusive"}  # fmt: skip
    return comparison, row


def test_end_to_end_is_keyed_by_pair_model_and_task():
    """A sweep on two models and two tasks (five rows, one pair without runs on the probe's task): the
    probe on chain (tiny-2m) gets its own pairs' rows, the placebo's although the twin of grpo has none."""
    made = [
        _comparison("chain (tiny-500k)", "s-twin", "s", 0.01),
        _comparison("chain (tiny-2m)", "s-twin", "s", 0.02),
        _comparison("chain (tiny-2m)", "s-placebo", "s", 0.03),
        _comparison("arith (tiny-2m)", "s-twin", "s", 0.04),
        _comparison("arith (tiny-2m)", "g-twin", "g", 0.05),
    ]
    report = {
        "analysis": {"credit": {"assessment": {"comparisons": [c for c, _ in made], "rows": [r for _, r in made]}}}
    }
    probe = {"task": "chain", "model": "tiny-2m", "plan": {"credit_controls": {"s": ["s-twin", "s-placebo"],
                                                                             "g": ["g-twin"]}}}  # fmt: skip
    rows = end_to_end(probe, report)
    assert [(r["method"], r["control"], round(r["diff"], 6)) for r in rows] == [("s", "s-twin", 2.0),
                                                                              ("s", "s-placebo", 3.0)]  # fmt: skip
    assert end_to_end(probe, None) == [] and end_to_end({**probe, "task": "other"}, report) == []
    for _, row in made:  # a sweep of fewer than 3 seeds has no intervals: nothing to set beside the probe
        row["diff"].update(lo=None, hi=None)
    assert end_to_end(probe, report) == []
