"""The credit table (bench/report/credit_maps.py, ``creditbench credit-maps``) from a sweep's run
summaries: each row from its run's result, in the order of the spec the sweep ran; one line when
there is nothing to read."""

from __future__ import annotations

import math

import pytest

from bench.cli.credit_maps import main
from bench.errors import CreditBenchError
from bench.report import credit_maps
from bench.run.result import RunResult
from tests.run.test_result import result_json

CREDIT = {
    "credit_gini": 0.5,
    "credit_effective_token_ratio": 0.25,
    "credit_nonzero_frac": 0.75,
    "credit_mass_early": 0.5,
    "credit_mass_middle": 0.25,
    "credit_mass_late": -0.0,  # a rounding -0 is shown as 0
}


def write_run(results, name: str, method: str, train: dict) -> None:
    data = result_json() | {"run_name": name, "method": method, "eval_tasks": ["arithmetic"], "train": train}
    for i, point in enumerate(data["history"]):
        point["eval"] = {"arithmetic": {"pass_at_1": 0.25 + 0.5 * i}}
    RunResult(**data).write(results / "demo" / "runs" / f"{name}.json")


def test_each_row_is_its_runs_summary(tmp_path):
    write_run(tmp_path, "a-run", "grpo", {**CREDIT, "train_grad_norm_max": 2.5, "train_skipped_updates": 1.0})
    write_run(tmp_path, "b-run", "s_trace", {})  # a result from before these summaries: no credit columns
    a, b = credit_maps.rows(tmp_path, "demo")
    assert (a["run"], a["method"], a["base"], a["final"], a["steps"], a["nonfinite"]) == (
        "a-run",
        "grpo",
        0.25,
        0.75,
        5,
        1,
    )
    assert (
        a["max_grad_norm"] == 2.5 and a["credit_mass_late"] == 0.0 and not math.copysign(1, a["credit_mass_late"]) < 0
    )
    line = credit_maps.table([a, b]).splitlines()[2]
    assert line == (
        "| a-run | grpo | 0 | 0.250 -> 0.750 | 160 | 5 (1) | 2.50 | 0.500 | 0.250 | 0.750 | 0.50 / 0.25 / 0.00 |"
    )
    assert math.isnan(b["credit_gini"]) and b["nonfinite"] == 0 and math.isnan(b["max_grad_norm"])


def test_a_sweep_without_runs_is_one_line(tmp_path, capsys):
    with pytest.raises(CreditBenchError, match="no finished runs under"):
        main(["--sweep", "nothing", "--results_dir", str(tmp_path)])
    assert not (tmp_path / "nothing" / "credit.md").exists()
