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
   simulation benchmark (bench/studies/sequential_design.py) measures the error rate this gives.
2. **Multiplicity: Holm, sequentially.** Each of the m comparisons starts with alpha / m; when one
   is decided different, its alpha passes in equal parts to those still open, whose boundaries are
   then those of their new level, and they are tested again at the same look (the graphical
   approach of Maurer & Bretz 2013 with Holm's weights; it controls the family-wise error).
3. **Equivalence (within +-margin).** Two one-sided tests (TOST), each with its own spending
   boundaries at the comparison's share of alpha (one-sided), Holm-recycled among the equivalence
   tests in the same way. A comparison shown equivalent stops: for the difference test that is a
   non-binding futility stop, which can only lower its error.
4. **The cap.** Still open at the cap: "inconclusive at the cap", with what the cap resolved.
5. **Repeated confidence intervals** (Jennison & Turnbull 1989). Each decision carries d -+ c SE at the
   look where it stopped (a comparison open or at the cap: at its last look), c = :func:`critical` of the
   boundaries that spend the comparison's **Bonferroni share alpha / m** over the looks. A comparison's
   intervals at all its looks cover together with probability at least 1 - alpha / m whatever rule stops
   it, so the one at the stop keeps its coverage, and the m comparisons' intervals cover together with
   probability at least 1 - alpha: the family's simultaneous statement. The Holm-recycled level the
   decision was taken at is not used: it is larger only because other comparisons were called different,
   and if one of those calls is wrong the recycled interval over-spends (Holm's step-down has no
   simultaneous intervals at its recycled levels: Strassburger & Bretz 2008). The interval is therefore
   wider than the test: a difference decided with recycled alpha can have an interval that reaches 0, and
   an equivalence (two one-sided tests, each at one-sided alpha / m) one that reaches past the margin.
   After a sequential stop these, not the fixed-design Student-t intervals at the seeds a pair ran, are
   the intervals to quote (worked by hand in tests/report/test_sequential.py).

The decisions are a function of the runs' results, recomputed at every look: the report reproduces
exactly and a resumed sweep continues where the data say.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import special, stats

from bench.errors import CreditBenchError
from bench.stats import format as fmt
from bench.stats.paired import Summary, summarize
from bench.stats.power import mde
from bench.stats.spending import nominal
from bench.stats.verdict import Outcome, Verdict
from bench.sweep.schedule import SequentialSpec


@dataclass
class Decision:
    """Where one comparison ended: its verdict, the look (1-based) and seeds it was decided at, its
    estimate there, and its repeated confidence interval [lo, hi] = diff -+ critical x SE (item 5;
    None before the first look)."""

    name: str
    verdict: Verdict
    look: int | None
    seeds: int
    diff: float | None
    se: float | None
    t: float | None
    why: str
    lo: float | None = None
    hi: float | None = None
    critical: float | None = None


@dataclass
class Sequential:
    """A family's sequential analysis: each comparison's decision, and the labels that need more seeds."""

    schedule: SequentialSpec
    alpha: float
    margin: float
    decisions: list[Decision] = field(default_factory=list)

    @property
    def open(self) -> list[str]:
        return [d.name for d in self.decisions if d.verdict.outcome is Outcome.OPEN]

    def to_dict(self) -> dict[str, Any]:
        """The analysis as report.json keeps it (each verdict as its text)."""
        return {
            "schedule": {**asdict(self.schedule), "looks": list(self.schedule.looks)},
            "alpha": self.alpha,
            "margin": self.margin,
            "decisions": [{**asdict(d), "verdict": str(d.verdict)} for d in self.decisions],
        }


def _passes(t: float, df: int, level: float) -> bool:
    """Whether a one-sided t-statistic crosses the look's nominal one-sided ``level``."""
    return level > 0 and float(special.stdtr(df, -t)) < level  # stdtr(df, -t) = P(T_df > t)


def analyse(
    diffs: Mapping[str, Sequence[float]],
    schedule: SequentialSpec,
    alpha: float = 0.05,
    margin: float | None = 0.03,
    scale: Mapping[str, Sequence[float]] | None = None,
) -> Sequential:
    """The decisions of a family of comparisons from their paired differences (``diffs[name]``: in
    seed order, as many as each comparison has run so far). Every look whose seeds a comparison has
    is evaluated in order; a comparison is decided at the first look where it crosses a boundary,
    "open" while it awaits its next look's seeds, "inconclusive at the cap" after the last.

    With ``scale`` the margin is relative: ``scale[name]`` holds each unit's control value c_i (in the
    order of ``diffs[name]``), and the equivalence is |mean d| < margin x mean c, tested exactly by the
    two one-sided t-tests of the per-unit combinations d_i + margin c_i > 0 and margin c_i - d_i > 0
    (a ratio's equivalence test that needs no estimate of the ratio)."""
    if not diffs:
        raise CreditBenchError("a sequential family needs at least one comparison")
    data = {k: np.asarray(v, dtype=float) for k, v in diffs.items()}
    family = _Family(data, schedule, alpha, margin)
    if scale is not None:
        family.scale = {k: np.asarray(scale[k], dtype=float) for k in data}
    for k, n in enumerate(schedule.looks):
        family.look(k, n)
    return family.result()


class _Family:
    """The state of the analysis between looks: each comparison's current share of alpha (for the
    difference test and for the equivalence test) and the decisions taken."""

    def __init__(self, data: dict[str, np.ndarray], schedule: SequentialSpec, alpha: float, margin: float | None):
        self.data, self.schedule, self.alpha, self.margin = data, schedule, alpha, margin
        m = len(data)
        self.level_diff = dict.fromkeys(data, alpha / m)  # two-sided share: one-sided boundaries at half of it
        self.level_eq = dict.fromkeys(data, alpha / m)  # one-sided share of each half of the TOST
        self.done: dict[str, Decision] = {}
        self.scale: dict[str, np.ndarray] | None = None  # per-unit control values: a relative margin

    def _open(self) -> list[str]:  # the comparisons not yet decided
        return [x for x in self.data if x not in self.done]

    def _nominal(self, level: float, k: int) -> float:
        return nominal(self.schedule.fractions, level, self.schedule.spending)[k] if level > 0 else 0.0

    def _equivalent(self, x: str, n: int, k: int) -> tuple[bool, float]:
        nom = self._nominal(self.level_eq[x], k)
        d = self.data[x][:n]
        if self.scale is not None:  # H0: d <= -margin c; H0: d >= +margin c
            m = self.margin * self.scale[x][:n]
            lo, hi = summarize(d + m).t(), summarize(m - d).t()
        else:
            s = summarize(d)
            lo, hi = s.t(-self.margin), -s.t(self.margin)  # H0: d <= -margin; H0: d >= +margin
        return _passes(lo, n - 1, nom) and _passes(hi, n - 1, nom), nom

    def look(self, k: int, n: int) -> None:
        """Look ``k`` (0-based) at the first ``n`` seeds of every open comparison that has them: the
        difference tests with Holm's recycling until nothing more crosses, then the equivalence tests
        likewise; a difference that also lies inside the margin says so."""
        here = [x for x in self._open() if len(self.data[x]) >= n]
        st = {x: summarize(self.data[x][:n]) for x in here}
        while self._difference(here, st, k, n):
            pass
        if self.margin is None:
            return
        while self._equivalence(here, st, k, n):
            pass
        for x in here:
            d = self.done.get(x)
            if d is not None and d.look == k + 1 and d.verdict.directional and self._equivalent(x, n, k)[0]:
                d.verdict = d.verdict.within(self.margin, self.scale is not None)

    def _difference(self, here: list[str], st: dict[str, Summary], k: int, n: int) -> bool:
        """Decide the first open comparison whose difference test crosses, recycle its alpha; whether one did."""
        for x in (y for y in here if y not in self.done):
            nom = self._nominal(self.level_diff[x] / 2, k)
            if _passes(abs(st[x].t()), n - 1, nom):
                mean, se, t = st[x].mean, st[x].se, st[x].t()
                why = f"t = {t:+.2f} crossed (two-sided nominal level {2 * nom:.2g})"
                self.done[x] = Decision(x, Verdict.of(mean, True, False, None), k + 1, n, mean, se, t, why)
                _recycle(self.level_diff, x, self._open())
                return True
        return False

    def _equivalence(self, here: list[str], st: dict[str, Summary], k: int, n: int) -> bool:
        """Decide the first open comparison shown equivalent, recycle its alpha; whether one was."""
        for x in (y for y in here if y not in self.done):
            ok, nom = self._equivalent(x, n, k)
            if ok:
                why = f"both one-sided tests crossed (nominal level {nom:.2g})"
                s = st[x]
                verdict = Verdict.of(s.mean, False, True, self.margin, self.scale is not None)
                self.done[x] = Decision(x, verdict, k + 1, n, s.mean, s.se, s.t(), why)
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
            s = summarize(d) if n >= 2 else None
            mean, se, t = (s.mean, s.se, s.t()) if s else (float(d.mean()) if n else None, None, None)
            if n >= self.schedule.cap:
                verdict, why = Outcome.AT_CAP, "no boundary crossed by the cap"
            else:
                verdict, why = Outcome.OPEN, f"awaits seeds {self.schedule.next_look(n)}"
            out.decisions.append(Decision(x, Verdict(verdict), None, n, mean, se, t, why))
        for d in out.decisions:
            self._repeated(d)
        return out

    def _repeated(self, d: Decision) -> None:
        """Set ``d``'s repeated confidence interval (item 5): at the look where it stopped, else at the last
        look its seeds reach, on that look's seeds, at the Bonferroni share alpha / m."""
        looks = self.schedule.looks
        k = d.look - 1 if d.look is not None else sum(n <= len(self.data[d.name]) for n in looks) - 1
        if k < 0:  # no look yet
            return
        s = summarize(self.data[d.name][: looks[k]])
        c = critical(self.schedule, self.alpha / len(self.data), k, s.df)
        d.lo, d.hi, d.critical = s.mean - c * s.se, s.mean + c * s.se, c  # d -+ c SE


def critical(schedule: SequentialSpec, alpha: float, look: int, df: int) -> float:
    """The Student-t critical value of a two-sided repeated confidence interval at ``look`` (0-based),
    ``df`` degrees of freedom: the quantile of the nominal level that the design's boundaries give that
    look when each side spends ``alpha`` / 2, as the difference test does (item 1), so d -+ c SE excludes
    0 exactly when that test at level ``alpha`` crosses there (Jennison & Turnbull's repeated confidence
    intervals: all looks' intervals cover together with probability at least 1 - alpha, so the interval
    at a sequential stop keeps its coverage). One look: the fixed design's t_{1 - alpha/2, df}."""
    nom = nominal(schedule.fractions, alpha / 2, schedule.spending)[look]
    return float(stats.t.isf(nom, df)) if df > 0 else math.inf


def label(alpha: float) -> str:
    """How a report names the repeated interval of a family at ``alpha``."""
    return f"repeated {1 - alpha:.0%} CI (valid after the sequential stop)"


def markdown(result: Sequential) -> str:
    """The family's decisions as a table: each comparison's verdict, the look and seeds it was decided
    at, its estimate there and why; then the schedule and what an undecided comparison resolved."""
    sch = result.schedule
    lines = [
        f"| comparison | decision | look | seeds | Δ | SE | {label(result.alpha)} | why |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for d in result.decisions:
        diff, se = fmt.number(d.diff, "+.3f"), fmt.number(d.se)
        ci = fmt.DASH if d.lo is None or d.hi is None else f"[{d.lo:+.3f}, {d.hi:+.3f}]"
        lines.append(f"| {d.name} | {d.verdict} | {d.look or '–'} | {d.seeds} | {diff} | {se} | {ci} | {d.why} |")
    lines += [
        "",
        f"Seeds in rounds: {sch.first} first, {sch.step} more per round while a comparison is undecided, at most "
        f"{sch.cap} (looks at {', '.join(map(str, sch.looks))}); {sch.spending} alpha spending at alpha "
        f"{result.alpha} with Holm's recycling across the {len(result.decisions)} comparisons; equivalence: both "
        f"one-sided tests within ±{result.margin:g}, spent alike. Δ and SE are taken where each was decided (after "
        "stopping early an estimate leans away from 0: read it with its look). The repeated CI is Δ ± c SE at that "
        f"look (an undecided comparison: its last), c from boundaries spending alpha/{len(result.decisions)} per "
        "comparison: all of them cover together with probability at least "
        f"{1 - result.alpha:.0%} however the looks stopped, which a fixed-design interval does not; it is wider "
        "than the tests (their alpha recycled), so it can reach 0 for a difference, or pass the margin for an "
        "equivalence, that they decided.",
    ]
    capped = [d for d in result.decisions if d.verdict.outcome is Outcome.AT_CAP and d.se]
    lines += [""] * bool(capped) + [
        f"{d.name}: at the cap its SE is {d.se:.3f}, so the design resolved differences of about "
        f"{mde(d.se, 1, None, paired=True, rule_of_thumb=True):.3f} (80% power at 5%, unadjusted); more seeds, "
        "or less noise per seed, decide it."
        for d in capped
    ]
    return "\n".join(lines)


def _recycle(levels: dict[str, float], gone: str, remaining: list[str]) -> None:
    """Holm's weights: the decided comparison's share passes in equal parts to those still open."""
    share = levels.pop(gone)
    levels[gone] = 0.0
    if remaining:
        for y in remaining:
            levels[y] += share / len(remaining)


def seeds_to_run(analysis: Sequential) -> dict[str, int]:
    """For each open comparison, the seeds its next look needs (the decided need none)."""
    return {
        d.name: analysis.schedule.next_look(d.seeds) for d in analysis.decisions if d.verdict.outcome is Outcome.OPEN
    }


def per_label(seeds: Mapping[str, float], pairs: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The seeds each label needs: the most that any of its comparisons (``pairs[name]``: its
    ``method`` and ``control``) needs, from ``seeds[name]``."""
    out: dict[str, float] = {}
    for name, n in seeds.items():
        for lab in (pairs[name]["method"], pairs[name]["control"]):
            out[lab] = max(out.get(lab, 0), n)
    return out


@dataclass(frozen=True)
class NextRound:
    """What a sequential sweep's report (its report.json, as a dict) says of the next round: the seeds
    each label must have (``needs``) and the comparisons still open, which await those seeds."""

    needs: dict[str, int]
    open: list[str]

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> NextRound:
        family = (report.get("analysis") or {}).get("sequential") or {}
        analysis = family.get("analysis") or {}
        cap = (analysis.get("schedule") or {}).get("cap")
        # undecided (no look) and short of the cap: open (Outcome.OPEN), as Sequential.open
        undecided = [d["name"] for d in analysis.get("decisions", []) if d["look"] is None and d["seeds"] < cap]
        return cls(dict(family.get("needs") or {}), undecided)
