"""Design time: what a design can resolve and what it costs, before any run (the dry run's lines:
bench.report.design).

- The minimum detectable difference of a fixed design (item 6 of bench.report.inference) from the
  variance components of a pilot: ``design_mde``, ``seeds_needed``, ``estimate_variance_components``.
  sigma^2 = sd_train^2 + sd_item^2 / (n P), where sd_item^2 = mean_i p_i(1-p_i) is the binomial
  variance of one sample of a problem (the between-problem variance cancels: every run sees the same
  problems) and sd_train is the training sd of e_ms.
- A sequential design (bench.report.sequential) simulated look by look: ``simulate``, and the runs
  it spends, ``runs_needed``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report import sequential
from bench.report.inference import pooled_tests, run_means
from bench.report.sequential import per_label
from bench.stats.paired import MIN_SEEDS
from bench.stats.power import mde
from bench.sweep.schedule import SequentialSpec


def design_mde(
    sd_train: float,
    sd_item: float,
    n_seeds: int,
    n_problems: int,
    n_samples: int,
    n_labels: int,
    m_comparisons: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float | None:
    """Item 6 before any run: the MDE of pass@1 for a design, from the variance components
    (``estimate_variance_components`` of a pilot). None with fewer than 2 seeds or labels."""
    if n_seeds < 2 or n_labels < 2:
        return None
    sigma = math.sqrt(sd_train**2 + sd_item**2 / (n_samples * n_problems))
    return mde(sigma, n_seeds, (n_labels - 1) * (n_seeds - 1), alpha, m_comparisons, power)


def seeds_needed(
    target: float,
    sd_train: float,
    sd_item: float,
    n_problems: int,
    n_samples: int,
    n_labels: int,
    m_comparisons: int,
    alpha: float = 0.05,
    power: float = 0.8,
    max_seeds: int = 1000,
) -> int | None:
    """The fewest seeds (>= 3) whose ``design_mde`` is at most ``target``; None if even
    ``max_seeds`` do not reach it (a target below what more seeds can buy, or zero)."""

    def fits(s: int) -> bool:
        return design_mde(sd_train, sd_item, s, n_problems, n_samples, n_labels, m_comparisons, alpha, power) <= target

    if not fits(max_seeds):
        return None
    lo, hi = MIN_SEEDS - 1, max_seeds  # fits(hi) holds; bisect for the smallest one that does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class VarianceComponents:
    """The run-to-run sd of pass@1 split into training (``sd_train``, of e_ms) and eval sampling
    (``sd_item``: per problem and sample, so eval sd of a run = sd_item / sqrt(n P))."""

    sd_train: float
    sd_item: float
    sd_run: float
    df: int
    n_problems: int
    n_samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_variance_components(counts: Mapping[str, Mapping[int, Any]], n: int) -> VarianceComponents:
    """sd_train and sd_item from a pilot's per-problem correct counts ``counts[label][seed]``
    (arrays of counts out of ``n`` samples over the same problems).

    sd_item^2 = mean over runs and problems of c(n-c) / (n(n-1)), the unbiased estimate of
    p(1-p); sd_run^2 is the two-way residual variance of the runs' pass@1 (c/n averaged over
    problems) on the seeds all labels share; sd_train = sqrt(max(0, sd_run^2 - sd_item^2/(nP)))."""
    if n < 2:
        raise CreditBenchError(f"the within-problem variance needs n >= 2 samples per problem, got n={n}")
    c_all = [np.asarray(v, dtype=float) for runs in counts.values() for v in runs.values()]
    if any(c.ndim != 1 or np.any((c < 0) | (c > n)) for c in c_all):
        raise CreditBenchError(f"counts[label][seed] must be per-problem correct counts in [0, {n}]")
    scores = {lab: {s: np.asarray(v, dtype=float) / n for s, v in runs.items()} for lab, runs in counts.items()}
    means, P = run_means(scores)
    labels = list(means)
    seeds = sorted(set.intersection(*(set(means[lab]) for lab in labels)))
    if len(labels) < 2 or len(seeds) < 2:
        raise CreditBenchError(f"variance components need >= 2 labels and >= 2 shared seeds, got {labels}, {seeds}")
    y = np.array([[means[lab][s] for s in seeds] for lab in labels])
    var_item = float(np.mean([np.mean(c * (n - c)) / (n * (n - 1)) for c in c_all]))
    res = pooled_tests(y)
    var_run = float(res["sigma"]) ** 2
    sd_train = math.sqrt(max(0.0, var_run - var_item / (n * P)))
    return VarianceComponents(sd_train, math.sqrt(var_item), math.sqrt(var_run), res["df"], int(P), n)


def simulate(
    sds: list[float], truth: list[float], schedule: SequentialSpec, alpha: float, margin: float, sims: int, seed: int
) -> dict[str, Any]:
    """``sims`` sequential sweeps: per comparison P(better), P(worse), P(equivalent), P(inconclusive),
    expected seeds; the family-wise error over the true nulls (any better/worse where truth is 0)."""
    rng = np.random.default_rng(seed)
    m = len(sds)
    names = [f"c{i}" for i in range(m)]
    counts = {k: np.zeros(m) for k in ("better", "worse", "equivalent", "inconclusive")}
    seeds = np.zeros((sims, m))
    family_error = 0
    for s in range(sims):
        data = {names[i]: rng.normal(truth[i], sds[i], schedule.cap) for i in range(m)}
        # one analysis of every seed up to the cap decides as the sweep's rounds do: a look reads only
        # the seeds up to it, and a decided comparison none after (tests/report/test_sequential.py)
        res = sequential.analyse(data, schedule, alpha, margin)
        error = False
        for i, d in enumerate(res.decisions):
            kind = d.verdict.outcome.value  # "better, within ±m" counts as better; open and at the cap inconclusive
            counts[kind if kind in counts else "inconclusive"][i] += 1
            seeds[s, i] = d.seeds
            error |= truth[i] == 0 and d.verdict.directional
        family_error += error
    return {
        "truth": truth,
        "p": {k: (v / sims).tolist() for k, v in counts.items()},
        "seeds": seeds.mean(0).tolist(),
        "seeds_all": seeds.tolist(),
        "family_error": family_error / sims,
    }


def runs_needed(pairs: dict[str, dict[str, Any]], seeds: list[list[float]], first: int, others: int) -> float:
    """Expected runs: each label at the most seeds any of its comparisons used; the other labels at ``first``."""
    total = [sum(per_label(dict(zip(pairs, row)), pairs).values()) + others * first for row in seeds]
    return float(np.mean(total))
