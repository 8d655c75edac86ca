"""The minimum detectable difference, the one formula of every report and every design."""

from __future__ import annotations

import math

RULE_OF_THUMB = 2.8
"""z_{0.975} + z_{0.80} = 1.960 + 0.842 = 2.80, as conventionally quoted (two-sided 5%, 80% power)."""


def mde(
    sigma: float,
    n_seeds: int,
    df: int | None,
    alpha: float = 0.05,
    m: int = 1,
    power: float = 0.8,
    paired: bool = False,
    rule_of_thumb: bool = False,
) -> float:
    """The smallest true difference that a two-sided t-test with ``df`` degrees of freedom at alpha/m
    (Bonferroni over m comparisons) finds with probability ``power``, (t_{1-alpha/(2m), df} +
    t_{power, df}) * SE, where SE is that of the difference over ``n_seeds`` seeds: sigma *
    sqrt(2/n_seeds) for two means of runs of sd ``sigma`` (bench.report.inference), sigma /
    sqrt(n_seeds) for a mean of ``paired`` differences of sd ``sigma`` (df n_seeds - 1).

    ``rule_of_thumb``: the normal approximation at 5% and 80% power with its quantiles summed and
    rounded as quoted, 2.8 (:data:`RULE_OF_THUMB`; alpha, m, power and df are then not used): what a
    sequential design resolved at the cap (bench.report.sequential) is stated this way."""
    if rule_of_thumb:
        spread = RULE_OF_THUMB * sigma
    else:
        from scipy import stats

        a = alpha / max(m, 1)
        spread = (stats.t.ppf(1 - a / 2, df) + stats.t.ppf(power, df)) * sigma
    return float(spread / math.sqrt(n_seeds) if paired else spread * math.sqrt(2 / n_seeds))
