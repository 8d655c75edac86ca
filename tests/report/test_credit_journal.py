"""The credit table's committed journals: a row's probe committed part-done resumes under the table's judge."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import credit_table as ct
from bench.report import credit_todo


def test_a_committed_journal_is_of_its_judge_s_plan():
    """A probe committed part-done (its journal under ``partial/``, bench.paired.journal) is resumed by the
    judge the table runs for its row: the journal's plan is that judge's plan at that size, so a change that
    moves the plan removes the journal with it. (The numerics are the machine's: checked where it resumes.)"""
    from bench.cli.judge import probe_plans
    from bench.paired.plan import describe

    table = ct.load()
    checked = 0
    for row in table.rows:
        sizes = ct.judge_sizes(row, table)
        kept = [s for s in sizes if (ct.probe_dir(row, s, table, Path("results")) / "partial").is_dir()]
        if not kept:
            continue
        plans = probe_plans(credit_todo.judge_args(row, table, sizes, per_update_only=True))
        for size in kept:
            plan, folder = plans[size]
            assert plan is not None, f"{folder} has a report and a journal: the journal should have gone"
            held = json.loads((folder / "partial" / "plan.json").read_text())["plan"]
            assert held == json.loads(json.dumps(describe(plan))), f"{folder}: a journal of another plan"
            checked += 1
    journals = list(Path("results/probes").glob("*/partial/plan.json"))
    assert checked == len(journals), journals  # every committed journal belongs to a row of the table
