"""bench/perf/probe_pace.py: a probe's recorded work counted from its records, at the plain pace and at each
label's, and the medians by size, on hand-made records."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from bench.perf import probe_pace as pp
from tests.paired.test_paired import SPEC
from tests.paired.test_resume import under_arca


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from bench.paired.plan import ProbeOptions, probe_plan

    spec = tmp_path_factory.mktemp("pace") / "probe-tiny.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    full = probe_plan(spec, ProbeOptions(batches=2, phases=(0.0, 1.0), lrs=(2e-4,)), tmp_path_factory.mktemp("r"))
    return dataclasses.replace(full, pairs=full.pairs[:1])


def _records() -> dict:
    """Two trajectories of the twin, two checkpoints each; the method's and the twin's update on 3 batches."""
    checkpoints = [{"reference": "s_trace-twin", "seed": s, "phase": p} for s in (0, 1) for p in (0.0, 1.0)]
    updates = [
        {"reference": "s_trace-twin", "seed": 0, "phase": 0.0, "batch": b, "label": label}
        for b in range(3)
        for label in ("s_trace", "s_trace-twin")
    ]
    return {"checkpoints": checkpoints, "updates": updates, "segments": [{"label": "s_trace"}]}


def test_the_work_counts_trajectories_updates_and_segments_at_each_label_s_pace(plan):
    steps = -(-plan.budget // (plan.labels["s_trace"].rl.prompts_per_step * plan.labels["s_trace"].rl.group_size))
    plain = pp.work(plan, _records(), paced=True)  # no LoRA, no measured method cost: every pace 1
    assert plain == {"trajectory_step": 2 * steps, "update": 6, "oracle_rollout": 0, "segment_update": 1}

    adapted = under_arca(plan)
    paced = pp.work(adapted, _records(), paced=True)
    assert paced["trajectory_step"] == pytest.approx(2 * steps * 1.17)  # the twin's steps under LoRA
    assert paced["update"] == pytest.approx(3 * 1.55 * 1.17 + 3 * 1.17)
    assert paced["segment_update"] == pytest.approx(1.55 * 1.17)
    assert pp.work(adapted, _records(), paced=False) == plain


def test_the_summary_is_the_median_ratio_by_size_and_adapter():
    row = lambda model, lora, rec, paced, plain: {  # noqa: E731
        "model": model, "lora": lora, "recorded_s": rec, "charged_s": paced, "plain_s": plain}  # fmt: skip
    rows = [row("tiny-8m", False, 80, 100, 100), row("tiny-500k", False, 30, 10, 10)]
    rows += [row("tiny-500k", False, 10, 10, 10), row("tiny-500k", True, 30, 20, 15)]
    rows += [row("tiny-500k", False, 12, 10, 10)]
    out = pp.summary(rows)
    assert [(s["model"], s["lora"], s["probes"]) for s in out] == [
        ("tiny-500k", False, 3), ("tiny-500k", True, 1), ("tiny-8m", False, 1)]  # fmt: skip
    assert out[0]["paced"] == out[0]["plain"] == 1.2 and out[1]["paced"] == 1.5 and out[1]["plain"] == 2.0
    assert out[2]["paced"] == 0.8
    data = {"command": "python -m bench.perf.probe_pace", "machine": {"cpu": "X"}, "rows": [], "summary": out}
    md = pp.markdown(data)
    assert "| tiny-500k | yes | 1 | 2.00 | 1.50 |" in md
