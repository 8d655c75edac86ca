"""The statistics of a method comparison: the training seed is the unit of replication.

Data: for one eval task and one metric (higher is better, on [0, 1]: pass@k, avg@n),
``scores[label][seed]`` is either the per-problem scores of that run (an array over the same P
problems in every run; pass@1 of a problem is c/n, see ``pass_at_k_per_problem``) or, for older
results, the run's value alone. Inference uses the run means y_ms (the mean over problems), so
both kinds give the same tests; without per-problem counts only the split of the run-to-run
variance into training and eval sampling (``estimate_variance_components``) is unavailable.

1. Model. On the seeds every label has (the others are dropped and listed), the two-way model
   y_ms = mu + a_m + b_s + e_ms,  e_ms ~ N(0, sigma^2), over M labels and S seeds.
   b_s is what a seed shares across methods (data order, initialisation); it cancels in every
   difference. sigma^2 = sum_ms r_ms^2 / df with r_ms = y_ms - ybar_m. - ybar_.s + ybar_..
   and df = (M-1)(S-1): the residual variance pooled across all methods.
2. Difference to the baseline: d = ybar_m. - ybar_0., SE = sigma * sqrt(2/S), t = d/SE,
   p = 2 P(T_df > |t|). With M = 2 this is exactly the paired t-test over seeds.
3. Intervals, inside the metric's range. Difference: d -+ t_{(1+level)/2, df} * SE intersected
   with [-1, 1] (the truth lies in the range, so coverage is kept). Mean m of a label's S run
   means (not pooled: b_s is part of a mean's error): Student-t (df S-1) on the arcsine-root
   scale, asin(sqrt(m)) -+ t * SE_m / (2 sqrt(m(1-m))) (delta method) clipped to [0, pi/2],
   mapped back by sin^2. Near 0 and 1 run means are skewed: a t-interval truncated to [0, 1]
   covers about 0.92 at a true pass@1 of 0.01 with 5 seeds, this one 0.94-0.95 (the same in
   mid-range); a bootstrap over 5 seeds undercovers. The tests check coverage by simulation.
   With fewer than 3 seeds: no intervals and no p-values, the values and a note.
4. Multiplicity. The family (every label vs the baseline x eval tasks, on the primary metric)
   is an explicit list: ``holm`` (step-down; controls the family-wise error) and
   ``benjamini_hochberg`` (step-up; controls the false discovery rate) take raw p-values.
5. Equivalence (TOST) with margin delta: p_tost = max(P(T_df > (d + delta)/SE),
   P(T_df < (d - delta)/SE)), Holm-adjusted across the family. Verdict, first match:
   "equivalent (±delta)" when the adjusted p_tost < alpha (the margin is the smallest
   difference that matters, so a significant difference shown to lie inside it is called
   equivalent; its p_Holm still shows it is real), "better"/"worse" when Holm's p < alpha (by
   the sign of d), else "inconclusive".
6. Minimum detectable difference: MDE = (t_{1-a'/2, df} + t_{power, df}) * sigma * sqrt(2/S)
   with a' = alpha/m (Bonferroni, which is Holm's first step: conservative) for m comparisons.
   At design time, before any run, sigma comes from a pilot's variance components
   (bench.report.sizing).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from bench.errors import CreditBenchError
from bench.stats import format as fmt
from bench.stats.family import benjamini_hochberg, holm
from bench.stats.intervals import mean_interval
from bench.stats.paired import MIN_SEEDS
from bench.stats.power import mde
from bench.stats.verdict import Verdict

FEW_SEEDS_NOTE = (
    "fewer than {min} seeds common to all labels ({s}): a run-to-run sd from so few seeds is too unreliable "
    "for an interval or a test, so only the values are given; run more seeds"
)
RUN_LEVEL_NOTE = (
    "run-level values only (no per-problem scores): tests and intervals are unaffected (they use run means), "
    "but the split of the run-to-run variance into training and eval sampling is unavailable"
)


def pooled_tests(y: np.ndarray, delta: float | None = None, level: float = 0.95) -> dict[str, np.ndarray]:
    """The two-way analysis (items 1-3, 5) of run means ``y`` [..., M, S], label 0 the baseline,
    vectorised over leading axes. Returns arrays: ``diff``, ``se``, ``t``, ``p``, ``lo``, ``hi``
    and ``p_tost`` (NaN without delta) [..., M-1]; ``sigma`` [...]; ``df`` (an int)."""
    y = np.asarray(y, dtype=float)
    M, S = y.shape[-2:]
    df = (M - 1) * (S - 1)
    r = y - y.mean(-1, keepdims=True) - y.mean(-2, keepdims=True) + y.mean((-2, -1), keepdims=True)
    sigma = np.sqrt((r**2).sum((-2, -1)) / df)  # [...]
    means = y.mean(-1)  # [..., M]
    diff = means[..., 1:] - means[..., :1]  # [..., M-1]
    se = np.broadcast_to((sigma * math.sqrt(2 / S))[..., None], diff.shape)
    half = stats.t.ppf(0.5 + level / 2, df) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        t = diff / se
        p = np.where(np.isnan(t), 1.0, 2 * stats.t.sf(np.abs(t), df))  # 0/0: no difference, no noise
        p_tost = np.full(diff.shape, np.nan)
        if delta is not None:
            lower = stats.t.sf((diff + delta) / se, df)  # H0: d <= -delta
            upper = stats.t.cdf((diff - delta) / se, df)  # H0: d >= +delta
            p_tost = np.maximum(lower, upper)
    lo, hi = np.clip(diff - half, -1, 1), np.clip(diff + half, -1, 1)
    return {"diff": diff, "se": se, "t": t, "p": p, "lo": lo, "hi": hi, "p_tost": p_tost, "sigma": sigma, "df": df}


@dataclass(frozen=True)
class Estimate:
    """A value with its interval (None where there are too few seeds for one)."""

    value: float
    lo: float | None = None
    hi: float | None = None


@dataclass(frozen=True)
class Difference:
    """A label's difference to the baseline with its pooled SE, t-test and TOST p-values."""

    value: float
    lo: float | None = None
    hi: float | None = None
    se: float | None = None
    p: float | None = None
    p_tost: float | None = None


@dataclass
class Comparison:
    """Every label against the baseline on one eval task and one metric (items 1-3, 5)."""

    task: str
    metric: str
    baseline: str
    seeds: list[int]
    dropped: dict[str, list[int]]
    n_problems: int | None
    n_samples: int | None
    df: int
    sigma: float | None
    level: float
    delta: float | None
    means: dict[str, Estimate]
    diffs: dict[str, Difference]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_means(scores: Mapping[str, Mapping[int, Any]]) -> tuple[dict[str, dict[int, float]], int | None]:
    """Each run's mean score (``scores[label][seed]``: per-problem values or a run value) and the number
    of problems every run scored (None for run-level values)."""
    sizes, means = set(), {}
    for label, runs in scores.items():
        means[label] = {}
        for seed, v in runs.items():
            a = np.asarray(v, dtype=float)
            if a.ndim > 1 or a.size == 0 or not np.all((a >= 0) & (a <= 1)):
                raise CreditBenchError(f"scores[{label!r}][{seed}] must be a value or per-problem values in [0, 1]")
            sizes.add(a.size if a.ndim == 1 else None)
            means[label][int(seed)] = float(a.mean())
    if len(sizes - {None}) > 1:
        raise CreditBenchError(
            f"every run must score the same problems; got per-problem arrays of sizes {sorted(sizes - {None})}"
        )
    return means, (None if None in sizes else sizes.pop())


def compare(
    scores: Mapping[str, Mapping[int, Any]],
    baseline: str,
    task: str = "",
    metric: str = "pass_at_1",
    delta: float | None = None,
    level: float = 0.95,
    n_samples: int | None = None,
) -> Comparison:
    """Every label of ``scores[label][seed]`` (per-problem scores or a run value) against
    ``baseline`` on the seeds all labels share; ``delta`` is the equivalence margin (none: no TOST)."""
    if baseline not in scores:
        raise CreditBenchError(f"baseline {baseline!r} has no runs; labels with runs: {', '.join(sorted(scores))}")
    if len(scores) < 2:
        raise CreditBenchError(f"a comparison needs the baseline and at least one other label, got {sorted(scores)}")
    means, n_problems = run_means(scores)
    labels = [baseline] + sorted(lab for lab in means if lab != baseline)
    seeds = sorted(set.intersection(*(set(means[lab]) for lab in labels)))
    dropped = {lab: sorted(set(means[lab]) - set(seeds)) for lab in labels if set(means[lab]) - set(seeds)}
    notes = [f"{lab}: seeds {fmt.seed_span(s)} left out (not run for every label)" for lab, s in dropped.items()]
    if n_problems is None:
        notes.append(RUN_LEVEL_NOTE)
    if not seeds:
        raise CreditBenchError(f"no seed was run for every label of {labels}; nothing to compare")
    y = np.array([[means[lab][s] for s in seeds] for lab in labels])  # [M, S]
    M, S = y.shape
    base = y[0].mean()
    if S < MIN_SEEDS:
        notes.append(FEW_SEEDS_NOTE.format(min=MIN_SEEDS, s=S))
        return Comparison(
            task, metric, baseline, seeds, dropped, n_problems, n_samples, (M - 1) * (S - 1), None, level, delta,
            {lab: Estimate(float(y[i].mean())) for i, lab in enumerate(labels)},
            {lab: Difference(float(y[i].mean() - base)) for i, lab in enumerate(labels) if i},
            notes,
        )  # fmt: skip
    res = pooled_tests(y, delta, level)
    lo, hi = mean_interval(y, level)
    mean_est = {lab: Estimate(float(y[i].mean()), float(lo[i]), float(hi[i])) for i, lab in enumerate(labels)}
    diffs = {
        lab: Difference(
            float(res["diff"][i]), float(res["lo"][i]), float(res["hi"][i]), float(res["se"][i]), float(res["p"][i]),
            None if delta is None else float(res["p_tost"][i]),
        )
        for i, lab in enumerate(labels[1:])
    }  # fmt: skip
    return Comparison(
        task, metric, baseline, seeds, dropped, n_problems, n_samples, res["df"], float(res["sigma"]), level, delta,
        mean_est, diffs, notes,
    )  # fmt: skip


@dataclass
class Row:
    """One comparison of the family, with its adjusted p-values and verdict."""

    label: str
    task: str
    metric: str
    mean: Estimate
    diff: Difference
    p_holm: float | None
    p_bh: float | None
    p_tost_holm: float | None
    verdict: Verdict


@dataclass
class Assessment:
    """A family of comparisons (items 4-6): its rows (in the comparisons' order) and, per
    comparison, the design's MDE at the family's m comparisons."""

    alpha: float
    power: float
    m: int
    rows: list[Row]
    mde: list[float | None]
    comparisons: list[Comparison]

    def to_dict(self) -> dict[str, Any]:
        """The assessment as report.json keeps it (each verdict as its text)."""
        return {**asdict(self), "rows": [{**asdict(r), "verdict": str(r.verdict)} for r in self.rows]}


def row_pairs(assessment: dict[str, Any]) -> Iterator[tuple[str, str, str, dict | None, float | None]]:
    """(label, baseline, task, row, mde) of every row of an assessment as report.json keeps it
    (:meth:`Assessment.to_dict`), in its order: the rows follow the comparisons and, within each, its
    labels against its baseline; ``task`` names the model too (bench.report.comparisons.where)."""
    rows = iter(assessment.get("rows") or [])
    mdes = assessment.get("mde") or []
    for i, c in enumerate(assessment.get("comparisons") or []):
        for label in c.get("diffs") or {}:
            yield label, c.get("baseline"), c.get("task"), next(rows, None), mdes[i] if i < len(mdes) else None


def verdict(diff: float, p_holm: float | None, p_tost_holm: float | None, alpha: float, delta: float | None) -> Verdict:
    """Item 5's verdict (the rule: bench.stats.verdict): a significant difference ("better", "worse"), an
    equivalence ("equivalent (±m)": the TOST bounds it inside the margin), both ("worse, within ±m": real
    but smaller than the margin), else inconclusive."""
    equivalent = p_tost_holm is not None and p_tost_holm < alpha and delta is not None
    return Verdict.of(diff, p_holm is not None and p_holm < alpha, equivalent, delta)


def assess(comparisons: Sequence[Comparison], alpha: float = 0.05, power: float = 0.8) -> Assessment:
    """Adjust the family (every label vs baseline in ``comparisons``, which should hold one metric,
    the primary one) with Holm and BH, give each its verdict and each task the design's MDE."""
    pairs = [(c, lab) for c in comparisons for lab in c.diffs]
    tested = [i for i, (c, lab) in enumerate(pairs) if c.diffs[lab].p is not None]
    m = len(tested)
    p_raw = [pairs[i][0].diffs[pairs[i][1]].p for i in tested]
    adj = dict(zip(tested, zip(holm(p_raw), benjamini_hochberg(p_raw)))) if m else {}
    tost_idx = [i for i in tested if pairs[i][0].diffs[pairs[i][1]].p_tost is not None]
    tost = dict(zip(tost_idx, holm([pairs[i][0].diffs[pairs[i][1]].p_tost for i in tost_idx]))) if tost_idx else {}
    rows = []
    for i, (c, lab) in enumerate(pairs):
        (p_h, p_b), p_t, d = adj.get(i, (None, None)), tost.get(i), c.diffs[lab]
        v = verdict(d.value, p_h, p_t, alpha, c.delta)
        rows.append(Row(lab, c.task, c.metric, c.means[lab], d, p_h, p_b, p_t, v))
    mdes = [None if c.sigma is None else mde(c.sigma, len(c.seeds), c.df, alpha, m, power) for c in comparisons]
    return Assessment(alpha, power, m, rows, mdes, list(comparisons))


def _ci(e: Estimate | Difference, signed: bool = False) -> str:
    return fmt.interval(e.value, e.lo, e.hi, "+.3f" if signed else ".3f")


def mde_line(c: Comparison, m: int, value: float | None, power: float = 0.8) -> str:
    """The sentence every report prints about what its design can resolve."""
    S = len(c.seeds)
    others = [lab for lab in c.means if lab != c.baseline]
    which = f"`{others[0]}` vs `{c.baseline}`" if len(others) == 1 else f"each label vs `{c.baseline}`"
    if value is None:
        return (
            f"`{c.task}`, {which}: with {S} seed(s) this design resolves no difference (at least {MIN_SEEDS} needed)."
        )
    design = f"{c.n_problems} problems x {c.n_samples or '?'} samples" if c.n_problems else "run-level values"
    return (
        f"`{c.task}`, {which}: this design ({S} seeds, {design}, {m} comparisons, Holm) detects a difference of "
        f"{100 * value:.1f} points of {c.metric.replace('pass_at_', 'pass@')} with {power:.0%} power; differences "
        f"smaller than that are not resolved."
    )


def markdown(a: Assessment, interval: str = "CI", verdict: str = "TOST verdict") -> str:
    """The comparison table of an assessment, each comparison's notes, and the MDE lines; ``interval``
    and ``verdict`` name the differences' intervals and verdicts (a sequential family's are those of
    its decisions: repeated intervals, verdicts in rounds)."""
    out = [
        f"| label | task | mean [CI] | diff to baseline [{interval}] | p | p_Holm | p_BH | {verdict} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = iter(a.rows)
    shown = None
    for c in a.comparisons:
        if (c.baseline, c.task, c.seeds) != shown:  # once for the pairs that share it
            out.append(f"| {c.baseline} (baseline) | {c.task} | {_ci(c.means[c.baseline])} | – | – | – | – | – |")
            shown = (c.baseline, c.task, c.seeds)
        for r in (next(rows) for _ in c.diffs):
            out.append(
                f"| {r.label} | {r.task} | {_ci(r.mean)} | {_ci(r.diff, True)} | {fmt.p_value(r.diff.p)} "
                f"| {fmt.p_value(r.p_holm)} | {fmt.p_value(r.p_bh)} | {r.verdict} |"
            )
    out.append("")
    out += [f"- `{c.task}`: {n}" for c in a.comparisons for n in c.notes]
    out += [mde_line(c, a.m, v, a.power) for c, v in zip(a.comparisons, a.mde)]
    return "\n".join(out)
