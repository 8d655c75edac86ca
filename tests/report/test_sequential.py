"""bench.report.sequential: the spending boundaries against published values and a Monte Carlo of
the score process, the decisions on small simulated families (error rate under the null, Holm's
recycling, equivalence), the sweep's round-by-round analysis equal to one analysis of all seeds, the repeated confidence
intervals worked by hand, and bad schedules refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.errors import CreditBenchError
from bench.report import sequential as seq
from bench.stats.spending import boundaries, spent
from bench.stats.verdict import Outcome, Verdict
from bench.sweep.schedule import SequentialSpec


def test_obrien_fleming_and_pocock_boundaries_match_published_values():
    # Lan-DeMets spending, 4 equally spaced looks, one-sided 0.025 (gsDesign's sfLDOF and sfLDPocock)
    obf = boundaries((0.25, 0.5, 0.75, 1.0), 0.025, "obf")
    assert obf == pytest.approx((4.333, 2.963, 2.359, 2.014), abs=2e-3)
    pocock = boundaries((0.25, 0.5, 0.75, 1.0), 0.025, "pocock")
    assert pocock == pytest.approx((2.368, 2.368, 2.358, 2.350), abs=3e-3)
    assert boundaries((1.0,), 0.025, "obf") == pytest.approx((1.95996,), abs=1e-4)  # one look: the fixed z


def test_boundaries_spend_exactly_alpha_on_the_score_process():
    rng = np.random.default_rng(0)
    fr = (0.2, 0.5, 0.7, 1.0)
    c = np.array(boundaries(fr, 0.05, "pocock"))
    inc = rng.normal(size=(400_000, 4)) * np.sqrt(np.diff((0.0, *fr)))
    z = inc.cumsum(1) / np.sqrt(fr)
    crossed = (z >= c).any(1).mean()
    assert crossed == pytest.approx(0.05, abs=0.002)
    first_look = (z[:, 0] >= c[0]).mean()
    assert first_look == pytest.approx(spent(0.2, 0.05, "pocock"), abs=0.0015)


def test_schedule_looks_and_bad_values_are_one_line():
    assert SequentialSpec(3, 4, 12).looks == (3, 7, 11, 12)
    assert SequentialSpec(6, 6, 18).fractions == pytest.approx((1 / 3, 2 / 3, 1.0))
    for args, msg in [
        ((2, 3, 12), "sequential.first must be >= 3 seeds"),
        ((3, 0, 12), "sequential.step must be >= 1"),
        ((6, 3, 4), "sequential.cap must be >= sequential.first"),
        ((3, 3, 12, "linear"), "sequential.spending must be one of obf, pocock"),
    ]:
        with pytest.raises(CreditBenchError, match=msg) as e:
            SequentialSpec(*args)
        assert "\n" not in str(e.value)


def test_family_wise_error_under_the_null_stays_at_alpha():
    """Three comparisons, no true difference, 6 looks of 3 seeds: any better/worse is an error."""
    rng = np.random.default_rng(1)
    schedule = SequentialSpec(3, 3, 18, "pocock")
    errors, sims = 0, 600
    for _ in range(sims):
        res = seq.analyse({f"c{i}": rng.normal(0, 1, 18) for i in range(3)}, schedule, 0.05, None)
        errors += any(d.verdict.directional for d in res.decisions)
    assert errors / sims <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sims)


def test_a_large_effect_stops_at_the_first_look_and_a_null_one_runs_to_the_cap():
    rng = np.random.default_rng(2)
    schedule = SequentialSpec(4, 4, 12)
    res = seq.analyse({"big": 1.0 + rng.normal(0, 0.01, 12), "none": rng.normal(0, 1, 12)}, schedule, 0.05, None)
    big, none = res.decisions
    assert big.verdict == Verdict(Outcome.BETTER) and big.look == 1 and big.seeds == 4
    assert none.verdict.outcome is Outcome.AT_CAP and none.seeds == 12 and none.look is None


def test_holm_recycling_lets_a_second_comparison_cross_at_the_same_look():
    """At one look (cap = first), b's p lies between alpha/2 and alpha: it is rejected only after a
    passes its share on, as Holm's step-down does."""
    schedule = SequentialSpec(10, 1, 10)
    a = np.linspace(0.9, 1.1, 10)  # huge t
    base = np.array([-1.2, -0.7, -0.3, 0.1, 0.4, 0.6, 0.9, 1.1, 1.4, 1.7])
    b = base - base.mean() + 2.5 * base.std(ddof=1) / math.sqrt(10)  # t = 2.5 on 9 df: p = 0.034
    alone = seq.analyse({"b": b, "x": np.linspace(-1, 1, 10)}, schedule, 0.05, None)  # b at alpha/2: no
    assert alone.decisions[0].verdict.outcome is Outcome.AT_CAP
    with_a = seq.analyse({"a": a, "b": b}, schedule, 0.05, None)
    assert [str(d.verdict) for d in with_a.decisions] == ["better", "better"]


def test_equivalence_is_decided_within_the_margin_and_not_beyond_it():
    rng = np.random.default_rng(3)
    schedule = SequentialSpec(6, 6, 30)
    tight = rng.normal(0, 0.02, 30)
    res = seq.analyse({"tight": tight}, schedule, 0.05, 0.03)
    assert str(res.decisions[0].verdict) == "equivalent (±0.03)" and res.decisions[0].seeds < 30
    on_margin = 0.03 + rng.normal(0, 0.02, 30)  # the truth sits on the margin: not equivalent
    assert seq.analyse({"m": on_margin}, schedule, 0.05, 0.03).decisions[0].verdict.outcome is not Outcome.EQUIVALENT


def test_round_by_round_equals_one_analysis_of_every_seed():
    """The sweep's loop (analyse what ran, run the open comparisons' next look) decides exactly as one
    analysis of all seeds to the cap, which the simulation benchmark uses."""
    rng = np.random.default_rng(4)
    schedule = SequentialSpec(3, 3, 15)
    for _ in range(30):
        data = {f"c{i}": rng.normal(rng.choice([0, 0.5]), 1, 15) for i in range(3)}
        have = dict.fromkeys(data, 3)
        while True:
            res = seq.analyse({k: v[: have[k]] for k, v in data.items()}, schedule, 0.05, 0.3)
            more = seq.seeds_to_run(res)
            if not more:
                break
            have.update(more)
        whole = seq.analyse(data, schedule, 0.05, 0.3)
        assert [(d.verdict, d.look, d.seeds) for d in res.decisions] == [
            (d.verdict, d.look, d.seeds) for d in whole.decisions
        ]


def test_open_comparisons_say_which_seeds_they_await():
    res = seq.analyse({"a": [0.1, -0.2, 0.05, 0.3]}, SequentialSpec(3, 3, 9), 0.05, 0.03)
    d = res.decisions[0]
    assert d.verdict.outcome is Outcome.OPEN and d.why == "awaits seeds 6" and res.open == ["a"]
    assert seq.seeds_to_run(res) == {"a": 6}
    with pytest.raises(CreditBenchError, match="at least one comparison"):
        seq.analyse({}, SequentialSpec(3, 3, 9))


def test_critical_is_the_t_quantile_of_the_looks_nominal_level():
    """One look (cap = first): the boundary spends all of alpha / 2 per side, so c is the fixed design's
    t_{0.975, 9} = 2.262. Pocock, looks every 6 seeds to 48: the first look (t = 6/48) spends
    0.025 ln(1 + (e - 1) / 8) = 0.004864 per side, so c = t_{1 - 0.004864, 5} = 4.060; later looks are
    wider than the fixed 2.262 too."""
    assert seq.critical(SequentialSpec(10, 1, 10), 0.05, 0, 9) == pytest.approx(2.2622, abs=1e-4)
    pocock = SequentialSpec(6, 6, 48, "pocock")
    assert seq.critical(pocock, 0.05, 0, 5) == pytest.approx(4.0601, abs=1e-3)
    assert all(seq.critical(pocock, 0.05, k, 47) > 2.2622 for k in range(8))
    assert seq.critical(pocock, 0.05, 0, 0) == math.inf


def test_a_decision_carries_its_repeated_interval_at_the_bonferroni_share():
    """Two comparisons, one look at 10 seeds: each interval spends the Bonferroni share 0.05 / 2, so
    c = t_{1 - 0.0125, 9} = 2.685 and the interval is mean -+ 2.685 SE. b (t = 2.5, SE = 0.2948) is
    called better only once a passes its alpha on (Holm), but its interval, (2.5 -+ 2.685) x 0.2948 =
    [-0.055, +1.528], reaches below 0: the simultaneous statement is wider than the recycled test."""
    schedule = SequentialSpec(10, 1, 10)
    a = np.linspace(0.9, 1.1, 10)
    base = np.array([-1.2, -0.7, -0.3, 0.1, 0.4, 0.6, 0.9, 1.1, 1.4, 1.7])
    b = base - base.mean() + 2.5 * base.std(ddof=1) / math.sqrt(10)
    res = seq.analyse({"a": a, "b": b}, schedule, 0.05, None)
    d = res.decisions[1]
    assert str(d.verdict) == "better" and d.critical == pytest.approx(2.6850, abs=1e-4)
    assert (d.lo, d.hi) == pytest.approx((-0.0545, 1.5284), abs=1e-4)
    assert {"lo", "hi", "critical"} <= set(res.to_dict()["decisions"][1])
    table = seq.markdown(res)
    assert "repeated 95% CI (valid after the sequential stop)" in table and "| [-0.055, +1.528] |" in table


def test_the_repeated_interval_is_taken_at_the_look_that_stopped_or_the_last_one():
    """A large effect stops at look 1 (4 seeds): its interval is from those 4 seeds at c of look 1 (df 3),
    whatever seeds came later; a null runs to the cap: its interval is at look 3 on all 12 seeds."""
    rng = np.random.default_rng(2)
    schedule = SequentialSpec(4, 4, 12)
    big_data, none_data = 1.0 + rng.normal(0, 0.01, 12), rng.normal(0, 1, 12)
    big, none = seq.analyse({"big": big_data, "none": none_data}, schedule, 0.05, None).decisions
    c = seq.critical(schedule, 0.025, 0, 3)
    se = big_data[:4].std(ddof=1) / 2
    assert big.critical == pytest.approx(c) and (big.lo, big.hi) == pytest.approx(
        (big_data[:4].mean() - c * se, big_data[:4].mean() + c * se)
    )
    assert none.look is None and none.critical == pytest.approx(seq.critical(schedule, 0.025, 2, 11))
    assert none.lo < none.diff < none.hi


def _runs(values: dict[str, list[float]]) -> list:
    """Run-level results on one task: ``values[label][seed]`` its final pass@1."""
    from bench.run.result import EvalPoint, RunResult

    out = []
    for label, vs in values.items():
        for seed, v in enumerate(vs):
            points = [EvalPoint(0, 0, 0, {"toy": {"pass_at_1": 0.2}}), EvalPoint(8, 800, 1, {"toy": {"pass_at_1": v}})]
            out.append(RunResult(
                run_name=f"{label}-s{seed}", mlflow_run_id="", method=label.split("-")[0], task="toy", model="m",
                params=1, seed=seed, steps=8, samples=800, tokens=1, wall_s=1.0, tags={"label": label},
                budget={"samples": 800, "tokens": 0}, base=points[0].eval["toy"], final=points[-1].eval["toy"],
                delta_pass_at_1={}, history=points,
            ))  # fmt: skip
    return out


def test_the_credit_table_and_the_probe_print_the_repeated_interval_of_a_sequential_family():
    """A one-pair family decided in rounds: the credit table and the probe's end-to-end row carry the
    decision's repeated interval, named as such; without a sequential schedule, the fixed-design one."""
    from bench.report.comparisons import analyse as report_analysis
    from bench.report.per_update import end_to_end
    from bench.sweep.analysis import Analysis

    twin = [0.50, 0.52, 0.47, 0.55, 0.49, 0.51]
    runs = _runs({"s": [t + d for t, d in zip(twin, (0.10, 0.13, 0.08, 0.12, 0.06, 0.11))], "s-twin": twin})
    probe = {"task": "toy", "model": "m", "plan": {"credit_controls": {"s": ["s-twin"]}}}
    plain = Analysis(credit_controls={"s": ["s-twin"]})
    fixed = report_analysis(runs, "s-twin", plain)
    (row,) = end_to_end(probe, {"analysis": fixed})
    assert "repeated" not in fixed["credit"] and row["interval"] == "95% CI"
    rounds = report_analysis(runs, "s-twin", Analysis(credit_controls={"s": ["s-twin"]}, sequential=SequentialSpec()))
    (d,) = rounds["sequential"]["analysis"]["decisions"]
    label = "repeated 95% CI (valid after the sequential stop)"
    assert f"diff to baseline [{label}]" in rounds["credit"]["markdown"]
    assert f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]" in rounds["credit"]["markdown"]
    (row,) = end_to_end(probe, {"analysis": rounds})
    assert row["interval"] == label and (row["lo"], row["hi"]) == pytest.approx((100 * d["lo"], 100 * d["hi"]))
    assert rounds["credit"]["assessment"] == fixed["credit"]["assessment"]  # report.json keeps the fixed design
