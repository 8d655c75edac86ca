"""ScaleRL's curve fit (bench/report/curve_fit.py) on simulated runs of known A, B, C_mid: the
parameters recovered inside their bootstrap intervals, a short budget flagged, the held-out half of a
noiseless curve predicted; too few eval points or seeds reported, not fitted; the committed embedded
sweep's 3-point design flagged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.cli.curve_fit import main
from bench.errors import CreditBenchError
from bench.report.curve_fit import Fit, extrapolation_check, fit_curve, fit_label, intervals_overlap, markdown_lines
from bench.report.summary import load_runs
from bench.run.result import EvalPoint, RunResult

REPO = Path(__file__).resolve().parents[2]
TRUE = {"A": 0.8, "B": 1.5, "C_mid": 2000.0}


def _run(label: str, seed: int, c: np.ndarray, r: np.ndarray) -> RunResult:
    history = [
        EvalPoint(i, int(x), 10 * int(x), {"toy": {"pass_at_1": float(v)}}) for i, (x, v) in enumerate(zip(c, r))
    ]
    return RunResult(
        run_name=f"{label}-toy-m-seed{seed}", mlflow_run_id="", method=label, task="toy", model="m", params=1,
        seed=seed, steps=len(c) - 1, samples=int(c[-1]), tokens=0, wall_s=1.0, tags={"label": label},
        budget={"samples": int(c[-1]), "tokens": 0}, base=history[0].eval["toy"], final=history[-1].eval["toy"],
        delta_pass_at_1={}, history=history,
    )  # fmt: skip


def _runs(label: str = "grpo", *, c_max: float = 8000, points: int = 12, seeds: int = 10, sd: float = 0.01, **true):
    """``seeds`` runs evaluated at C = 0 and ``points`` even steps up to ``c_max``: the curve of ``true``
    (default TRUE, R0 = 0.2) plus Gaussian noise of sd ``sd`` at every point, the base's included."""
    p = TRUE | true
    curve = Fit(p["A"], p["B"], p["C_mid"], 0.2, 0.0, True)
    c = np.round(np.linspace(0, c_max, points + 1))
    rng = np.random.default_rng(len(label))
    r = np.concatenate([[0.2], curve.predict(c[1:])])
    return [_run(label, s, c, r + rng.normal(0, sd, len(c))) for s in range(seeds)]


def test_known_parameters_are_recovered_inside_their_intervals():
    out = fit_label(_runs(), "toy", n_boot=200)
    f, iv = out["fit"], out["interval"]
    assert out["identifiable"] and f.converged and f.at_bound == ()
    assert f.A == pytest.approx(0.8, abs=0.01) and f.B == pytest.approx(1.5, rel=0.1)
    assert f.C_mid == pytest.approx(2000, rel=0.05)
    for k, v in TRUE.items():
        assert iv[k][0] <= v <= iv[k][1], (k, iv[k])
    assert out["at_bound"] == {"A": 0.0, "B": 0.0, "C_mid": 0.0}
    assert out["budget_too_short"] is False and iv["A"][1] - iv["A"][0] < 0.1
    assert fit_label(_runs(), "toy", n_boot=200) == out  # a fixed grid and bootstrap seed: deterministic


def test_a_budget_up_to_a_quarter_of_c_mid_is_too_short():
    out = fit_label(_runs(c_max=500), "toy", n_boot=200)
    assert out["identifiable"] and out["budget_too_short"] is True
    assert "A's interval" in out["reason"] or "C_mid's interval" in out["reason"]
    assert out["interval"]["C_mid"][1] > 500


def test_the_extrapolation_predicts_the_held_out_half_of_a_noiseless_curve():
    runs = _runs(seeds=3, sd=0.0)
    x = extrapolation_check(runs, "toy", n_boot=20)
    assert x["possible"] and x["c"] == [4667, 5333, 6000, 6667, 7333, 8000]
    assert x["max_error"] < 1e-3 and x["error"] < 1e-3
    assert x["fit"].C_mid == pytest.approx(2000, rel=1e-3) and len(x["interval"]) == 6
    noisy = extrapolation_check(_runs(), "toy", n_boot=100)
    assert noisy["possible"] and noisy["error"] < 0.02


def test_two_points_past_the_base_are_not_identifiable():
    runs = _runs(c_max=2048, points=2)
    out = fit_label(runs, "toy")
    assert not out["identifiable"] and out["fit"] is None and out["budget_too_short"] is True
    assert out["reason"] == "3 free parameters (A, B, C_mid) need 3 distinct C > 0, have 2 (1024, 2048)"
    x = extrapolation_check(runs, "toy")
    assert x == {"possible": False, "reason": "3 eval points with 0 < C <= 1024 needed, have 1"}
    assert "not identifiable: 3 free parameters" in markdown_lines([out | {"extrapolation": x}])[-1]


def test_fewer_than_three_seeds_give_a_point_fit_and_no_interval():
    out = fit_label(_runs(seeds=2), "toy")
    assert out["fit"].A == pytest.approx(0.8, abs=0.02)
    assert out["interval"] is None and out["at_bound"] is None and out["budget_too_short"] is None
    assert out["reason"] == "no interval from fewer than 3 seeds (2)"
    assert extrapolation_check(_runs(seeds=2), "toy")["interval"] is None
    # the point fit alone already puts C_mid past a short budget
    short = fit_label(_runs(seeds=1, c_max=500, sd=0.0), "toy")
    assert short["budget_too_short"] is True and "past the budget 500" in short["reason"]


def test_labels_that_end_at_different_levels_have_apart_a_intervals():
    high, low = fit_label(_runs("high"), "toy", n_boot=100), fit_label(_runs("low", A=0.6), "toy", n_boot=100)
    assert intervals_overlap(high, low) == {"A": False, "C_mid": True}
    assert intervals_overlap(high, fit_label(_runs(seeds=2), "toy")) == {"A": None, "C_mid": None}
    row = markdown_lines([high])[-1]
    assert row.startswith("| high | toy | m | 0.8")
    assert row.endswith("| n/a: not run | separates: A and C_mid determined within the budget |")


def test_fit_curve_keeps_to_its_bounds():
    c = np.array([1000.0, 2000.0, 3000.0])
    still_rising = fit_curve(c, 0.2 + c / 4000, 0.2)  # a straight line to 0.95: no bend to place C_mid by
    assert 0.0 <= still_rising.A <= 1.0 and 0.1 <= still_rising.B <= 5.0
    assert still_rising.at_bound and still_rising.C_mid <= 300000
    with pytest.raises(CreditBenchError, match="at least one point with C > 0"):
        fit_curve(np.zeros(2), np.ones(2), 0.2)


def test_a_group_must_be_one_label_with_a_base_eval():
    with pytest.raises(CreditBenchError, match="one \\(label, model\\) group; got a/m, b/m"):
        fit_label(_runs("a", seeds=1) + _runs("b", seeds=1), "toy")
    with pytest.raises(CreditBenchError, match="no toy/pass_at_2 eval at C = 0 \\(metrics there: pass_at_1\\)"):
        fit_label(_runs(seeds=1), "toy", metric="pass_at_2")


def test_the_embedded_sweeps_two_point_design_is_flagged():
    """results/embedded: 6 to 48 seeds per label evaluated at 0 and 2,048 samples: no label's curve is
    determined, and the report says so."""
    runs = load_runs(str(REPO / "results"), "embedded")
    grpo = fit_label([r for r in runs if r.label == "grpo"], "chain")
    assert not grpo["identifiable"] and "have 1 (2048)" in grpo["reason"]


def test_the_command_prints_the_table_and_names_an_unknown_sweep(tmp_path, capsys):
    for run in _runs(seeds=3):
        run.write(tmp_path / "toy" / "runs" / f"{run.run_name}.json")
    assert main(["--sweep", "toy", "--results_dir", str(tmp_path), "--n_boot", "20"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2].startswith("| label | task | model | A [95% CI]") and table[4].startswith("| grpo | toy | m |")
    with pytest.raises(CreditBenchError, match="no finished runs under .*nope.*sweeps with finished runs in .*: toy"):
        main(["--sweep", "nope", "--results_dir", str(tmp_path)])
