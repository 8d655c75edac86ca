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
   At design time (``design_mde``) sigma^2 = sd_train^2 + sd_item^2 / (n P), where sd_item^2 =
   mean_i p_i(1-p_i) is the binomial variance of one sample of a problem (the between-problem
   variance cancels: every run sees the same problems) and sd_train is the training sd of e_ms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from bench.errors import CreditBenchError
from bench.report.stats import benjamini_hochberg, holm, mde, mean_interval, seed_span

MIN_SEEDS = 3
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


def _run_means(scores: Mapping[str, Mapping[int, Any]]) -> tuple[dict[str, dict[int, float]], int | None]:
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
    means, n_problems = _run_means(scores)
    labels = [baseline] + sorted(lab for lab in means if lab != baseline)
    seeds = sorted(set.intersection(*(set(means[lab]) for lab in labels)))
    dropped = {lab: sorted(set(means[lab]) - set(seeds)) for lab in labels if set(means[lab]) - set(seeds)}
    notes = [f"{lab}: seeds {seed_span(s)} left out (not run for every label)" for lab, s in dropped.items()]
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
    verdict: str


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
        return asdict(self)


def verdict(diff: float, p_holm: float | None, p_tost_holm: float | None, alpha: float, delta: float | None) -> str:
    """Item 5's verdict: a significant difference ("better", "worse"), an equivalence ("equivalent (±m)":
    the TOST bounds it inside the margin), both ("worse, within ±m": real but smaller than the margin),
    else inconclusive."""
    equivalent = p_tost_holm is not None and p_tost_holm < alpha and delta is not None
    significant = p_holm is not None and p_holm < alpha
    if significant:
        direction = "better" if diff > 0 else "worse"
        return f"{direction}, within ±{delta:g}" if equivalent else direction
    return f"equivalent (±{delta:g})" if equivalent else "inconclusive"


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
    f = "+.3f" if signed else ".3f"
    return f"{e.value:{f}}" if e.lo is None else f"{e.value:{f}} [{e.lo:{f}}, {e.hi:{f}}]"


def _p(p: float | None) -> str:
    return "–" if p is None else ("<0.001" if p < 1e-3 else f"{p:.3f}")


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


def markdown(a: Assessment) -> str:
    """The comparison table of an assessment, each comparison's notes, and the MDE lines."""
    out = [
        "| label | task | mean [CI] | diff to baseline [CI] | p | p_Holm | p_BH | TOST verdict |",
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
                f"| {r.label} | {r.task} | {_ci(r.mean)} | {_ci(r.diff, True)} | {_p(r.diff.p)} "
                f"| {_p(r.p_holm)} | {_p(r.p_bh)} | {r.verdict} |"
            )
    out.append("")
    out += [f"- `{c.task}`: {n}" for c in a.comparisons for n in c.notes]
    out += [mde_line(c, a.m, v, a.power) for c, v in zip(a.comparisons, a.mde)]
    return "\n".join(out)


# ------------------------------------------------------------------ design time
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
    means, P = _run_means(scores)
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
