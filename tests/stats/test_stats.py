"""bench.stats: the paired summary against its formulas worked by hand, the two half-width orders, the
verdict's rule and its text, and the formatters' text."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.stats import format as fmt
from bench.stats.intervals import t_interval
from bench.stats.paired import stratified, summarize
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


def test_a_stratified_summary_weighs_every_stratum_alike():
    """Strata [1, 3] and [10]: mean (2 + 10) / 2 = 6; only the first has a variance, 2 / 2 = 1, so
    SE = sqrt(1) / 2 = 0.5 on 1 df."""
    s = stratified({"a": [1.0, 3.0], "b": [10.0]})
    assert (s.mean, s.se, s.df, s.n) == (6.0, 0.5, 1, 3)
    assert s.half() == pytest.approx(stats.t.ppf(0.975, 1) * 0.5)
    assert stratified({"a": [2.0], "b": [2.0]}).half() == math.inf


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
    assert [fmt.p_value(p) for p in (None, 0.0004, 0.0123)] == ["–", "<0.001", "0.012"]
    assert fmt.seed_span([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
