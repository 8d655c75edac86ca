"""bench.report.sequential: the spending boundaries against published values and a Monte Carlo of
the score process, the decisions on small simulated families (error rate under the null, Holm's
recycling, equivalence), the sweep's round-by-round analysis equal to one analysis of all seeds, and
bad schedules refused in one line."""

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
