"""Seeds added in rounds until each comparison of a family is decided: a group-sequential design.

The data of one comparison are its paired differences over training seeds (method minus control,
same seed), in the order the seeds were run. Seeds come in rounds on a fixed schedule: the first
``first`` seeds, then ``step`` more per round, up to ``cap``. After each round every comparison still
open is tested, and one that is decided gets no more seeds:

1. **Difference (better / worse).** A two-sided test of d = 0 at each look, against boundaries that
   spend the comparison's share of alpha over the looks (Lan-DeMets spending functions: ``obf``, an
   O'Brien-Fleming-type alpha(t) = 2 - 2 Phi(z_{1-a/2} / sqrt t), which keeps most of alpha for the
   last looks; ``pocock``, alpha(t) = a ln(1 + (e - 1) t), which spends early), t = seeds / cap the
   information fraction. The boundaries are computed on the z scale for the schedule (the exact
   recursion over the looks' joint normal distribution, :func:`boundaries`) and each look's nominal
   level is applied to the paired t-statistic with its own degrees of freedom (seeds - 1). The
   simulation benchmark (bench/perf/sequential_design.py) measures the error rate this gives.
2. **Multiplicity: Holm, sequentially.** Each of the m comparisons starts with alpha / m; when one
   is decided different, its alpha passes in equal parts to those still open, whose boundaries are
   then those of their new level, and they are tested again at the same look (the graphical
   approach of Maurer & Bretz 2013 with Holm's weights; it controls the family-wise error).
3. **Equivalence (within +-margin).** Two one-sided tests (TOST), each with its own spending
   boundaries at the comparison's share of alpha (one-sided), Holm-recycled among the equivalence
   tests in the same way. A comparison shown equivalent stops: for the difference test that is a
   non-binding futility stop, which can only lower its error.
4. **The cap.** Still open at the cap: "inconclusive at the cap", with what the cap resolved.

The decisions are a function of the runs' results, recomputed at every look: the report reproduces
exactly and a resumed sweep continues where the data say.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from scipy import special, stats

from bench.errors import CreditBenchError

Spending = Literal["obf", "pocock"]
SPENDING: tuple[str, ...] = ("obf", "pocock")
MIN_FIRST = 3
"""No test from fewer than 3 seeds (the report's standard): the first round has at least 3."""


def spent(t: float, a: float, kind: str) -> float:
    """Alpha spent by information fraction ``t`` (0..1) of a (one-sided) level ``a``."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if kind == "obf":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - a / 2) / math.sqrt(t)))
    if kind == "pocock":
        return float(a * math.log(1 + (math.e - 1) * t))
    raise CreditBenchError(f"spending must be one of {', '.join(SPENDING)}, got {kind!r}")


def _pdf(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


@lru_cache(maxsize=4096)
def boundaries(fractions: tuple[float, ...], a: float, kind: str, grid: int = 801) -> tuple[float, ...]:
    """One-sided z boundaries c_1..c_K for looks at information ``fractions`` (increasing, the last
    1) spending level ``a`` with ``kind``: P(Z_1 >= c_1 or ... or Z_k >= c_k) = spent(t_k) under H0
    for every k, where Z_k is the standardised sum of independent increments (the score process).
    Computed by the recursion of Armitage, McPherson and Rowe: the density of the score S_k on the
    continuation region, carried from look to look on a grid, the next boundary solved so that the
    probability of crossing it first equals that look's increment of spent alpha."""
    if not fractions or any(b <= a_ for a_, b in zip(fractions, fractions[1:])) or fractions[0] <= 0:
        raise CreditBenchError(f"look fractions must increase from above 0, got {list(fractions)}")
    out: list[float] = []
    # the score S_k = Z_k sqrt(I_k), I_k = t_k; S_1 ~ N(0, t_1)
    prev_x: np.ndarray | None = None
    prev_f: np.ndarray | None = None
    prev_t = 0.0
    prev_spent = 0.0
    for t in fractions:
        target = spent(t, a, kind) - prev_spent
        dt = t - prev_t
        if prev_x is None:
            c = stats.norm.isf(max(target, 1e-300))
            out.append(float(c))
            hi = c * math.sqrt(t)
            x = np.linspace(-10 * math.sqrt(t), hi, grid)
            f = _pdf(x / math.sqrt(t)) / math.sqrt(t)
        else:
            sd = math.sqrt(dt)

            def cross(c: float, px=prev_x, pf=prev_f, sd=sd, t=t) -> float:
                # P(S_k >= c sqrt(t_k), still continuing at k-1)
                tail = special.ndtr((px - c * math.sqrt(t)) / sd)  # P(N(0,1) > (c sqrt t - x) / sd)
                return float(np.trapezoid(pf * tail, px))

            c = _solve(cross, target)
            out.append(float(c))
            top = (c if math.isfinite(c) else 40.0) * math.sqrt(t)
            x = np.linspace(-10 * math.sqrt(t), top, grid)
            # density of S_k on the continuation region: the old density convolved with N(0, dt)
            kernel = _pdf((x[:, None] - prev_x[None, :]) / sd) / sd
            f = np.trapezoid(kernel * prev_f[None, :], prev_x, axis=1)
        prev_x, prev_f, prev_t = x, f, t
        prev_spent += max(target, 0.0)
    return tuple(out)


def _solve(cross, target: float) -> float:
    """The c where ``cross(c)``, which falls as c rises, equals ``target``: bisection on [-10, 40]."""
    if target <= 0:
        return math.inf
    lo, hi = -10.0, 40.0
    if cross(lo) < target:
        return lo
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cross(mid) > target else (lo, mid)
    return (lo + hi) / 2


@lru_cache(maxsize=4096)
def nominal(fractions: tuple[float, ...], a: float, kind: str) -> tuple[float, ...]:
    """The nominal one-sided p-value threshold of each look: 1 - Phi(c_k)."""
    return tuple(float(stats.norm.sf(c)) for c in boundaries(fractions, a, kind))


@dataclass(frozen=True)
class Schedule:
    """The seeds a comparison receives look by look: ``first``, then ``step`` more per round, up to ``cap``."""

    first: int
    step: int
    cap: int
    spending: str = "obf"

    def __post_init__(self) -> None:
        if self.first < MIN_FIRST:
            raise CreditBenchError(
                f"sequential.first must be >= {MIN_FIRST} seeds (no test from fewer), got {self.first}"
            )
        if self.step < 1:
            raise CreditBenchError(f"sequential.step must be >= 1 seed, got {self.step}")
        if self.cap < self.first:
            raise CreditBenchError(f"sequential.cap must be >= sequential.first ({self.first}), got {self.cap}")
        if self.spending not in SPENDING:
            raise CreditBenchError(f"sequential.spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Seeds at each look."""
        n = list(range(self.first, self.cap, self.step)) + [self.cap]
        return tuple(dict.fromkeys(n))

    @property
    def fractions(self) -> tuple[float, ...]:
        return tuple(n / self.cap for n in self.looks)


@dataclass
class Decision:
    """Where one comparison ended: its verdict, the look (1-based) and seeds it was decided at, and
    its estimate there."""

    name: str
    verdict: str  # better, worse, equivalent (±m), better/worse within ±m, open, inconclusive at the cap
    look: int | None
    seeds: int
    diff: float | None
    se: float | None
    t: float | None
    why: str


@dataclass
class Sequential:
    """A family's sequential analysis: each comparison's decision, and the labels that need more seeds."""

    schedule: Schedule
    alpha: float
    margin: float
    decisions: list[Decision] = field(default_factory=list)

    @property
    def open(self) -> list[str]:
        return [d.name for d in self.decisions if d.verdict == "open"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": {**asdict(self.schedule), "looks": list(self.schedule.looks)},
            "alpha": self.alpha,
            "margin": self.margin,
            "decisions": [asdict(d) for d in self.decisions],
        }


def _t_stat(d: np.ndarray, shift: float = 0.0) -> tuple[float, float, float]:
    """Mean, SE and t of the paired differences (t of mean - shift)."""
    n = len(d)
    mean = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n))
    if se == 0:
        t = 0.0 if mean == shift else math.copysign(math.inf, mean - shift)
    else:
        t = (mean - shift) / se
    return mean, se, t


def _passes(t: float, df: int, level: float) -> bool:
    """Whether a one-sided t-statistic crosses the look's nominal one-sided ``level``."""
    return level > 0 and float(special.stdtr(df, -t)) < level  # stdtr(df, -t) = P(T_df > t)


def analyse(
    diffs: Mapping[str, Sequence[float]], schedule: Schedule, alpha: float = 0.05, margin: float | None = 0.03
) -> Sequential:
    """The decisions of a family of comparisons from their paired differences (``diffs[name]``: in
    seed order, as many as each comparison has run so far). Every look whose seeds a comparison has
    is evaluated in order; a comparison is decided at the first look where it crosses a boundary,
    "open" while it awaits its next look's seeds, "inconclusive at the cap" after the last."""
    if not diffs:
        raise CreditBenchError("a sequential family needs at least one comparison")
    family = _Family({k: np.asarray(v, dtype=float) for k, v in diffs.items()}, schedule, alpha, margin)
    for k, n in enumerate(schedule.looks):
        family.look(k, n)
    return family.result()


class _Family:
    """The state of the analysis between looks: each comparison's current share of alpha (for the
    difference test and for the equivalence test) and the decisions taken."""

    def __init__(self, data: dict[str, np.ndarray], schedule: Schedule, alpha: float, margin: float | None):
        self.data, self.schedule, self.alpha, self.margin = data, schedule, alpha, margin
        m = len(data)
        self.level_diff = dict.fromkeys(data, alpha / m)  # two-sided share: one-sided boundaries at half of it
        self.level_eq = dict.fromkeys(data, alpha / m)  # one-sided share of each half of the TOST
        self.done: dict[str, Decision] = {}

    def _open(self) -> list[str]:  # the comparisons not yet decided
        return [x for x in self.data if x not in self.done]

    def _nominal(self, level: float, k: int) -> float:
        return nominal(self.schedule.fractions, level, self.schedule.spending)[k] if level > 0 else 0.0

    def _equivalent(self, x: str, n: int, k: int) -> tuple[bool, float]:
        nom = self._nominal(self.level_eq[x], k)
        d = self.data[x][:n]
        lo = _t_stat(d, -self.margin)[2]  # H0: d <= -margin
        hi = -_t_stat(d, self.margin)[2]  # H0: d >= +margin
        return _passes(lo, n - 1, nom) and _passes(hi, n - 1, nom), nom

    def look(self, k: int, n: int) -> None:
        """Look ``k`` (0-based) at the first ``n`` seeds of every open comparison that has them: the
        difference tests with Holm's recycling until nothing more crosses, then the equivalence tests
        likewise; a difference that also lies inside the margin says so."""
        here = [x for x in self._open() if len(self.data[x]) >= n]
        st = {x: _t_stat(self.data[x][:n]) for x in here}
        while self._difference(here, st, k, n):
            pass
        if self.margin is None:
            return
        while self._equivalence(here, st, k, n):
            pass
        for x in here:
            d = self.done.get(x)
            if d is not None and d.look == k + 1 and d.verdict in ("better", "worse") and self._equivalent(x, n, k)[0]:
                d.verdict = f"{d.verdict}, within ±{self.margin:g}"

    def _difference(self, here: list[str], st: dict, k: int, n: int) -> bool:
        """Decide the first open comparison whose difference test crosses, recycle its alpha; whether one did."""
        for x in (y for y in here if y not in self.done):
            nom = self._nominal(self.level_diff[x] / 2, k)
            if _passes(abs(st[x][2]), n - 1, nom):
                mean, se, t = st[x]
                why = f"t = {t:+.2f} crossed (two-sided nominal level {2 * nom:.2g})"
                self.done[x] = Decision(x, "better" if t > 0 else "worse", k + 1, n, mean, se, t, why)
                _recycle(self.level_diff, x, self._open())
                return True
        return False

    def _equivalence(self, here: list[str], st: dict, k: int, n: int) -> bool:
        """Decide the first open comparison shown equivalent, recycle its alpha; whether one was."""
        for x in (y for y in here if y not in self.done):
            ok, nom = self._equivalent(x, n, k)
            if ok:
                why = f"both one-sided tests crossed (nominal level {nom:.2g})"
                self.done[x] = Decision(x, f"equivalent (±{self.margin:g})", k + 1, n, *st[x], why)
                _recycle(self.level_eq, x, self._open())
                return True
        return False

    def result(self) -> Sequential:
        margin = self.margin if self.margin is not None else math.nan
        out = Sequential(self.schedule, self.alpha, margin)
        for x, d in self.data.items():
            if x in self.done:
                out.decisions.append(self.done[x])
                continue
            n = len(d)
            mean, se, t = _t_stat(d) if n >= 2 else (float(d.mean()) if n else None, None, None)
            if n >= self.schedule.cap:
                verdict, why = "inconclusive at the cap", "no boundary crossed by the cap"
            else:
                verdict, why = "open", f"awaits seeds {_next_look(self.schedule.looks, n)}"
            out.decisions.append(Decision(x, verdict, None, n, mean, se, t, why))
        return out


def markdown(result: Sequential) -> str:
    """The family's decisions as a table: each comparison's verdict, the look and seeds it was decided
    at, its estimate there and why; then the schedule and what an undecided comparison resolved."""
    sch = result.schedule
    lines = [
        "| comparison | decision | look | seeds | Δ | SE | why |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for d in result.decisions:
        diff = "–" if d.diff is None else f"{d.diff:+.3f}"
        se = "–" if d.se is None else f"{d.se:.3f}"
        lines.append(f"| {d.name} | {d.verdict} | {d.look or '–'} | {d.seeds} | {diff} | {se} | {d.why} |")
    lines += [
        "",
        f"Seeds in rounds: {sch.first} first, {sch.step} more per round while a comparison is undecided, at most "
        f"{sch.cap} (looks at {', '.join(map(str, sch.looks))}); {sch.spending} alpha spending at alpha "
        f"{result.alpha} with Holm's recycling across the {len(result.decisions)} comparisons; equivalence: both "
        f"one-sided tests within ±{result.margin:g}, spent alike. Δ and SE are taken where each was decided (after "
        "stopping early an estimate leans away from 0: read it with its look).",
    ]
    capped = [d for d in result.decisions if d.verdict == "inconclusive at the cap" and d.se]
    lines += [""] * bool(capped) + [
        f"{d.name}: at the cap its SE is {d.se:.3f}, so the design resolved differences of about "
        f"{2.8 * d.se:.3f} (80% power at 5%, unadjusted); more seeds, or less noise per seed, decide it."
        for d in capped
    ]
    return "\n".join(lines)


def _next_look(looks: tuple[int, ...], n: int) -> int:  # the seeds of the look after n (the cap's at the end)
    return next((x for x in looks if x > n), looks[-1])


def _recycle(levels: dict[str, float], gone: str, remaining: list[str]) -> None:
    """Holm's weights: the decided comparison's share passes in equal parts to those still open."""
    share = levels.pop(gone)
    levels[gone] = 0.0
    if remaining:
        for y in remaining:
            levels[y] += share / len(remaining)


def seeds_to_run(analysis: Sequential, schedule: Schedule) -> dict[str, int]:
    """For each open comparison, the seeds its next look needs (the decided need none)."""
    return {d.name: _next_look(schedule.looks, d.seeds) for d in analysis.decisions if d.verdict == "open"}


def simulate(
    sds: list[float], truth: list[float], schedule: Schedule, alpha: float, margin: float, sims: int, seed: int
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
        res = analyse(data, schedule, alpha, margin)
        error = False
        for i, d in enumerate(res.decisions):
            kind = d.verdict.split(",")[0].split(" ")[0]
            counts[kind if kind in counts else "inconclusive"][i] += 1
            seeds[s, i] = d.seeds
            error |= truth[i] == 0 and d.verdict.startswith(("better", "worse"))
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
    names = list(pairs)
    total = []
    for row in seeds:
        by_label: dict[str, float] = {}
        for name, n in zip(names, row):
            for lab in (pairs[name]["method"], pairs[name]["control"]):
                by_label[lab] = max(by_label.get(lab, 0), n)
        total.append(sum(by_label.values()) + others * first)
    return float(np.mean(total))
