"""bench.stats: the paired summary against its formulas worked by hand, the two half-width orders, the
verdict's rule and its text, and the formatters' text."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.stats import format as fmt
from bench.stats.intervals import t_interval
from bench.stats.paired import nested, summarize
from bench.stats.power import mde
from bench.stats.verdict import Outcome, Verdict


def test_a_plain_summary_is_mean_sd_over_root_n_on_n_minus_1_df():
    """d = [1, 2, 3, 6]: mean 3, s^2 = (4 + 1 + 0 + 9) / 3 = 14/3, SE = sqrt(14/3) / 2, df 3."""
    s = summarize([1.0, 2.0, 3.0, 6.0])
    assert (s.mean, s.df, s.n) == (3.0, 3, 4)
    assert s.se == pytest.approx(math.sqrt(14 / 3) / 2)
    assert s.t(1.0) == pytest.approx(2 / s.se)
    assert s.p() == pytest.approx(2 * stats.t.sf(3 / s.se, 3))
    # the half-width in the order t * s / sqrt(n), the bits t_interval has always given
    d = np.array([1.0, 2.0, 3.0, 6.0])
    want = float(stats.t.ppf(0.975, 3) * d.std(ddof=1) / math.sqrt(4))
    assert s.half() == want and t_interval(d)["hi"] == 3.0 + want


def test_a_nested_summary_by_hand():
    """Two sampled levels, three trajectories of two checkpoints each (batches within):
    t1: [1, 3] and [4] -> checkpoint means 2, 4 -> 3;  t2: [0, 2] and [2, 4] -> 1, 3 -> 2;
    t3: [5] and [1, 3, 5] -> 5, 3 -> 4. The trajectories are the units: values 3, 2, 4, mean 3, sd 1,
    SE 1/sqrt(3) = 0.57735 on 2 df (the batches add no degrees of freedom), half-width
    t(0.975, 2) SE = 4.302653 x 0.57735 = 2.484138, p = 2 P(T_2 > 5.196) = 0.03510. With one trajectory
    its checkpoints are the units: t1 alone gives mean 3, sd sqrt(2), SE 1 on 1 df."""
    units = {"t1": {0.0: [1.0, 3.0], 1.0: [4.0]}, "t2": {0.0: [0.0, 2.0], 1.0: [2.0, 4.0]},
             "t3": {0.0: [5.0], 1.0: [1.0, 3.0, 5.0]}}  # fmt: skip
    s = nested(units)
    assert (s.mean, s.df, s.n) == (3.0, 2, 3) and s.se == pytest.approx(0.5773503)
    assert s.half() == pytest.approx(2.484138, abs=1e-6) and s.p() == pytest.approx(0.03510, abs=1e-5)
    one = nested({"t1": units["t1"]})
    assert (one.mean, one.se, one.df) == (3.0, pytest.approx(1.0), 1)
    assert nested({"t1": {0.0: [2.0]}}).half() == math.inf  # one unit at both levels: no interval


def test_the_rule_of_thumb_mde_is_2_8_se():
    assert mde(0.01, 1, None, paired=True, rule_of_thumb=True) == 2.8 * 0.01


def test_the_verdict_rule_and_its_text():
    assert str(Verdict.of(0.1, True, False, 0.03)) == "better"
    assert str(Verdict.of(-0.01, True, True, 0.03)) == "worse, within ±0.03"
    assert str(Verdict.of(0.01, False, True, 0.03)) == "equivalent (±0.03)"
    assert Verdict.of(0.01, False, False, 0.03) == Verdict(Outcome.INCONCLUSIVE)
    assert str(Verdict(Outcome.AT_CAP)) == "inconclusive at the cap" and str(Verdict(Outcome.OPEN)) == "open"
    assert Verdict(Outcome.BETTER).within(0.02).directional


def test_the_formatters():
    assert fmt.interval(0.5, 0.25, None) == "0.500" and fmt.interval(None, 1, 2) == "–"
    assert fmt.interval(0.1, -0.2, 0.3, "+.2f") == "+0.10 [-0.20, +0.30]"
    assert fmt.percent({"mean": 0.25, "lo": 0.05, "hi": 1.6}) == "+25% [+5, +160]" and fmt.percent(None) == "–"
    assert fmt.percent({"mean": -0.002, "lo": -0.39, "hi": 0.61}) == "+0% [-39, +61]"  # never "-0%"
    assert [fmt.p_value(p) for p in (None, 0.0004, 0.0123)] == ["–", "<0.001", "0.012"]
    assert fmt.seed_span([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


def test_the_words_come_from_their_rules():
    """bench.stats.words: one word for all, else each word with where it holds; phases by their intervals."""
    from bench.stats import words

    better, eq = Verdict(Outcome.BETTER), Verdict(Outcome.EQUIVALENT, 0.1, relative=True)
    assert words.across({"0.0001": better, "0.0002": better}) == "better at every rate"
    assert words.across({"0.0001": eq, "0.0002": better}) == (
        "equivalent (±10% of the control's) at 0.0001; better at 0.0002"
    )
    assert words.phases({"0": (0.1, 0.5), "0.5": (0.2, 0.3)}) == "above 0 at every phase"
    assert words.phases({"0": (-1.0, 1.0), "1": (-1.0, 1.0)}) == "not resolved at any phase"
    assert words.phases({"0": (-0.5, -0.1), "0.5": (-1.0, 1.0), "1": (0.2, 2.0)}) == (
        "below 0 at 0; not resolved at 0.5; above 0 at 1"
    )
