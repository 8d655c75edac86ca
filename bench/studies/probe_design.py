"""Benchmark: the credit probe's design (bench.report.per_update) simulated with the probe's own noise.

    python -m bench.studies.probe_design [--probe results/probes/embedded] [--sims 2000] [--seed 0]
                                         [--out results/benchmarks]

A credit probe (results/probes/<sweep>/report.json) samples reference trajectories in rounds: ``first``
for every pair, then ``step`` more for the pairs with a comparison still open, up to ``cap``. Each
trajectory t gives every comparison (a pair at one rate) its value d_t (the mean paired difference of one
update's gain in J) and g_t (the control's own gain), and after each round the family is decided by
``bench.report.sequential.analyse`` with the relative margin (``scale`` = the gains). This study draws
simulated probes from the report's per-trajectory values and runs that same rule:

1. **The model.** The pairs that share a reference trajectory (with ``reference: control`` each method's
   twin's trajectory, shared by the method's pairs; else one label's for all: bench.paired.plan) form a
   group; per trajectory, the vector (d_1, g_1, ..., d_k, g_k) of the group's comparisons is multivariate
   normal with the mean and covariance of the trajectories all of them share in the report. A singular
   correlation (fewer trajectories than components, or comparisons sharing an arm: d_1 + g_1 = d_2 + g_2
   where two pairs share the method's arm) gets a tiny ridge (``RIDGE``), which the report names.
2. **The rounds.** Each simulated probe draws ``cap`` trajectories per group up front and calls
   ``analyse`` once: a look reads only the trajectories up to it and a decided comparison none after, so
   one call decides as the rounds do (bench.report.sizing.simulate relies on the same property). A group
   runs until all its comparisons are decided: its trajectories are the most any of them used, as
   ``per_update.needs`` asks for.
3. **Scenarios.** ``null``: every mean d set to 0 (gains and covariance kept); ``half``: half the observed
   means; ``observed``: the estimates. The family-wise error is the share of simulated probes with any
   better/worse verdict on a comparison whose true d is 0, with its simulation SE; power is the share
   decided in the direction of the observed mean; the coverage is that of the repeated confidence interval
   the report prints (at the Bonferroni share alpha / m, at the look where the comparison stopped) for the
   true mean d, alone and for all comparisons together.

Writes ``<out>/probe_design.{md,json}``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report.sequential import analyse
from bench.script import md_table, run_script, script_parser, write_outputs
from bench.stats.verdict import Outcome
from bench.sweep.schedule import SequentialSpec

RIDGE = 1e-8
"""Added to a singular correlation matrix's diagonal (then rescaled to a unit diagonal): each component's
variance is kept, and the draws no longer need the exact linear relations of too few trajectories."""
SCENARIOS = {"null": 0.0, "half": 0.5, "observed": 1.0}
"""Each scenario's true mean differences as a multiple of the observed ones."""


@dataclass(frozen=True)
class Group:
    """The comparisons drawing on one reference trajectory: their names (family order), the mean, per-
    component SD and Cholesky factor of the correlation of (d_1, g_1, ..., d_k, g_k) per trajectory
    (``[2k]``, ``[2k]``, ``[2k, 2k]``), the shared trajectories they come from, and whether a ridge was
    added."""

    reference: str
    names: list[str]
    mean: np.ndarray  # [2k]
    sd: np.ndarray  # [2k]
    chol: np.ndarray  # [2k, 2k]
    trajectories: int
    ridged: bool

    def draw(self, rng: np.random.Generator, shrink: float, n: int) -> np.ndarray:
        """``n`` trajectories, ``[n, 2k]``, with every mean d multiplied by ``shrink``."""
        mean = self.mean.copy()
        mean[0::2] *= shrink  # the d components; the gains keep their means
        return mean + (rng.standard_normal((n, len(mean))) @ self.chol.T) * self.sd


def load(probe: str | Path) -> dict[str, Any]:
    """A probe's report.json, refused in one line where it is missing or predates the rounds."""
    path = Path(probe) / "report.json"
    if not path.is_file():
        raise CreditBenchError(f"no probe report at {path} (run creditbench credit-probe <sweep spec> first)")
    report = json.loads(path.read_text())
    if "cap" not in report.get("options", {}) or not all("trajectories" in r for r in report.get("comparisons", [])):
        raise CreditBenchError(
            f"{path} predates trajectories in rounds (its options have no cap or its comparisons no per-trajectory "
            "values): rerun the probe"
        )
    return report


def groups(report: dict[str, Any]) -> list[Group]:
    """The report's comparisons grouped by the trajectory they draw on, each group's normal model fitted
    to the trajectories all its comparisons share (item 1). A name repeated by a ``tuned`` row is the same
    comparison (the same arms at the same rates) and counts once."""
    rows: dict[str, dict[str, Any]] = {}
    for r in report["comparisons"]:
        rows.setdefault(r["comparison"], r)
    reference = report["options"].get("reference", "control")
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows.values():
        by.setdefault(r["method"] if reference == "control" else reference, []).append(r)
    return [_fit(ref, rs) for ref, rs in by.items()]


def _fit(reference: str, rows: list[dict[str, Any]]) -> Group:
    """One group's mean, SDs and correlation from the trajectories its comparisons share (a prefix of the
    rounds' order: each comparison lists those up to where it was decided)."""
    seeds = min((r["trajectories"]["seeds"] for r in rows), key=len)
    if any(r["trajectories"]["seeds"][: len(seeds)] != seeds for r in rows):
        raise CreditBenchError(
            f"the comparisons on {reference}'s trajectory list their trajectories in different orders"
        )
    if len(seeds) < 2:
        raise CreditBenchError(f"the comparisons on {reference}'s trajectory share {len(seeds)} trajectory; need >= 2")
    n = len(seeds)
    x = np.array([v for r in rows for v in (r["trajectories"]["diff"][:n], r["trajectories"]["control"][:n])]).T
    cov = np.cov(x, rowvar=False, ddof=1)  # [2k, 2k]
    sd = np.sqrt(np.diag(cov))
    spread = sd > 0
    corr = np.eye(len(sd))  # a component without spread is constant: its correlations do not matter
    corr[np.ix_(spread, spread)] = cov[np.ix_(spread, spread)] / np.outer(sd[spread], sd[spread])
    ridged = bool(np.linalg.eigvalsh(corr).min() < 1e3 * RIDGE)
    if ridged:
        corr = (corr + RIDGE * np.eye(len(sd))) / (1 + RIDGE)  # unit diagonal kept
    names = [r["comparison"] for r in rows]
    return Group(reference, names, x.mean(0), sd, np.linalg.cholesky(corr), n, ridged)


KIND = {Outcome.BETTER: "better", Outcome.WORSE: "worse", Outcome.EQUIVALENT: "equivalent"}
"""Where a verdict counts (every other outcome, after the cap's look: inconclusive at the cap)."""


def draw(family: list[Group], rng: np.random.Generator, shrink: float, cap: int) -> tuple[dict, dict]:
    """One simulated probe's data: every comparison's ``cap`` values of d and of g, by name."""
    diffs, gains = {}, {}
    for g in family:
        x = g.draw(rng, shrink, cap)  # [cap, 2k]
        for j, n in enumerate(g.names):
            diffs[n], gains[n] = x[:, 2 * j], x[:, 2 * j + 1]
    return diffs, gains


def simulate(
    family: list[Group], names: list[str], schedule: SequentialSpec, alpha: float, margin: float, shrink: float,
    sims: int, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """``sims`` simulated probes of one scenario (true d = ``shrink`` x observed): each comparison's
    outcome shares, power, the coverage of its repeated interval and its trajectories; each group's
    trajectories; the family-wise error over the true nulls and the intervals' joint coverage."""
    rng = np.random.default_rng(seed)
    truth = {n: float(shrink * g.mean[2 * j]) + 0.0 for g in family for j, n in enumerate(g.names)}  # no -0.0
    gain = {n: float(g.mean[2 * j + 1]) for g in family for j, n in enumerate(g.names)}
    keys = ("better", "worse", "equivalent", "at_cap", "power", "coverage", "trajectories")
    count = {n: dict.fromkeys(keys, 0.0) for n in names}
    per_group = np.zeros((sims, len(family)))  # the trajectories each group ran
    errors = covered_all = 0
    for s in range(sims):
        diffs, gains = draw(family, rng, shrink, schedule.cap)
        res = analyse({n: diffs[n] for n in names}, schedule, alpha, margin, scale=gains)
        error, all_in = False, True
        for d in res.decisions:
            c, t = count[d.name], truth[d.name]
            c[KIND.get(d.verdict.outcome, "at_cap")] += 1
            c["power"] += d.verdict.directional and t != 0 and (d.diff > 0) == (t > 0)
            inside = d.lo <= t <= d.hi  # the report's repeated interval holds the true mean
            c["coverage"] += inside
            c["trajectories"] += d.seeds
            all_in &= inside
            error |= t == 0 and d.verdict.directional
        seeds = {d.name: d.seeds for d in res.decisions}
        per_group[s] = [max(seeds[n] for n in g.names) for g in family]  # runs until all are decided
        errors += error
        covered_all += all_in
    fwer = errors / sims if 0 in truth.values() else None
    comparisons = {}
    for n in names:
        c = {k: v / sims for k, v in count[n].items()}
        c["power"] = c["power"] if truth[n] != 0 else None
        within = abs(truth[n]) < margin * gain[n]  # what an equivalence verdict claims
        comparisons[n] = {"truth": truth[n], "within_margin": within, **c}
    return {
        "shrink": shrink,
        "family_error": fwer,
        "family_error_se": None if fwer is None else math.sqrt(fwer * (1 - fwer) / sims),
        "coverage_all": covered_all / sims,
        "comparisons": comparisons,
        "trajectories": {g.reference: float(per_group[:, i].mean()) for i, g in enumerate(family)},
        "total": float(per_group.sum(1).mean()),
    }


def _p(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def markdown(data: dict[str, Any]) -> str:
    sch, fam = data["schedule"], data["groups"]
    m = sum(len(g["names"]) for g in fam)
    lines = [
        "# The credit probe's design, simulated with its own noise",
        "",
        f"`{data['command']}` ({data['wall_s']:.0f} s). The model is fitted to the per-trajectory values of "
        f"{data['probe']}/report.json. Trajectories: {sch['first']} first, {sch['step']} more per round while a "
        f"comparison of the group is open, at most {sch['cap']} (looks at {', '.join(map(str, sch['looks']))}); "
        f"{sch['spending']} spending at alpha {data['alpha']} with Holm's recycling across the {m} comparisons; "
        f"equivalence within ±{100 * data['margin']:g}% of the control's gain; {data['sims']} simulated probes per "
        "scenario.",
        "",
        "The fitted model: each comparison's mean and SD per trajectory of d (the difference of one update's gain "
        "in J, points) and g (the control's gain), from the trajectories its group shares (a group: the pairs on one "
        "reference trajectory, named by their method where each method's pairs use its twin's, else by the "
        "reference).",
        "",
    ]
    rows = []
    for g in fam:
        for n, c in zip(g["names"], g["comparisons"]):
            ratio = "–" if c["gain"] == 0 else f"{100 * c['diff'] / c['gain']:+.0f}%"
            rows.append([n, g["reference"], g["trajectories"], f"{c['diff']:+.3f}", f"{c['sd_diff']:.3f}",
                         f"{c['gain']:+.3f}", f"{c['sd_gain']:.3f}", ratio])  # fmt: skip
    lines += md_table(["comparison", "group", "shared", "mean d", "SD d", "mean g", "SD g", "d / g"], rows,
                      "llrrrrrr")  # fmt: skip
    lines += ["", "The family per scenario:", ""]
    groups_head = [f"trajectories: group {g['reference']}" for g in fam]
    rows = []
    for name, r in data["results"].items():
        fwer = "–" if r["family_error"] is None else f"{r['family_error']:.3f} ± {r['family_error_se']:.3f}"
        rows.append([name, fwer, f"{r['coverage_all']:.3f}", *(f"{r['trajectories'][g['reference']]:.1f}" for g in fam),
                     f"{r['total']:.1f}"])  # fmt: skip
    lines += md_table(["scenario", "family-wise error ± SE", "joint coverage", *groups_head, "total"], rows,
                      "l" + "r" * (len(fam) + 3))  # fmt: skip
    lines += ["", "Each comparison per scenario:", ""]
    rows = []
    for name, r in data["results"].items():
        for n, c in r["comparisons"].items():
            rows.append([name, n, f"{c['truth']:+.3f}", "yes" if c["within_margin"] else "no", _p(c["better"]),
                         _p(c["worse"]), _p(c["equivalent"]), _p(c["at_cap"]), _p(c["power"]), _p(c["coverage"]),
                         f"{c['trajectories']:.1f}"])  # fmt: skip
    head = ["scenario", "comparison", "true d", "within margin", "better", "worse", "equivalent", "at the cap",
            "power", "coverage", "trajectories"]  # fmt: skip
    lines += md_table(head, rows, "llrlrrrrrrr")
    lines += _targets_md(data["targets"])
    lines += ["", *data["notes"]]
    return "\n".join(lines) + "\n"


TARGET_RELATIVE, TARGET_MINUTES = 0.10, 20.0
"""The probe's targets: each comparison decided, or its interval within ±10% of the control's gain; the
whole probe within 20 minutes on 2 cores."""


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """What the probe itself reached against :data:`TARGET_RELATIVE` and :data:`TARGET_MINUTES`: each
    comparison's verdict and its interval's half-width relative to the control's gain, and its wall time."""
    rows = {}
    for r in report["comparisons"]:
        decided = r["verdict"].split(" (")[0] in ("better", "worse", "equivalent")
        rows[r["comparison"]] = {"verdict": r["verdict"], "trajectories": r["n"],
                                 "relative_half_width": r["relative_half_width"],
                                 "met": decided or r["relative_half_width"] <= TARGET_RELATIVE}  # fmt: skip
    minutes = report["wall_s"] / 60
    return {"comparisons": rows, "wall_min": minutes, "jobs": report["jobs"],
            "wall_met": minutes <= TARGET_MINUTES and report["jobs"] <= 2}  # fmt: skip


def _targets_md(t: dict[str, Any]) -> list[str]:
    rows = [[n, c["verdict"], str(c["trajectories"]), f"±{100 * c['relative_half_width']:.1f}%",
             "yes" if c["met"] else "no"] for n, c in t["comparisons"].items()]  # fmt: skip
    lines = ["", f"The probe's own targets: each comparison decided, or its repeated interval within "
             f"±{100 * TARGET_RELATIVE:g}% of the control's gain; the probe within {TARGET_MINUTES:g} minutes on 2 "
             f"cores (this one: {t['wall_min']:.1f} min on {t['jobs']} processes, "
             f"{'met' if t['wall_met'] else 'not met'}).", ""]  # fmt: skip
    return lines + md_table(["comparison", "verdict", "trajectories", "half-width / control's gain", "met"], rows,
                            "llrrl")  # fmt: skip


def notes(data: dict[str, Any]) -> list[str]:
    alpha, sims = data["alpha"], data["sims"]
    fwer = data["results"]["null"]["family_error"]
    se = math.sqrt(alpha * (1 - alpha) / sims)
    held = (
        "stays at or below"
        if fwer <= alpha
        else "is within two simulation SEs of"
        if fwer <= alpha + 2 * se
        else "EXCEEDS"
    )
    m = sum(len(g["names"]) for g in data["groups"])
    ridged = [g["reference"] for g in data["groups"] if g["ridged"]]
    least = min(c["coverage"] for r in data["results"].values() for c in r["comparisons"].values())
    target = 1 - alpha / m
    se_cover = math.sqrt(target * (1 - target) / sims)
    kept = (
        "reaches"
        if least >= target
        else "is within two simulation SEs of"
        if least >= target - 2 * se_cover
        else "FALLS SHORT of"
    )
    out = [
        f"Under the null the family-wise error {held} alpha = {alpha} ({fwer:.3f}; the simulation's SE at alpha is "
        f"{se:.3f}). It counts a simulated probe with any better/worse verdict on a comparison whose true d is 0. "
        f"The least coverage of one comparison's repeated interval, over every scenario, {kept} its "
        f"{target:.3f} ({least:.3f}; SE {se_cover:.3f}).",
        "",
        "Per comparison: the share of simulated probes ending better, worse, equivalent (within the margin of the "
        "control's gain) or inconclusive at the cap; power, the share decided in the direction of the true mean "
        "(none under the null); coverage, the share whose repeated interval (the report's, at alpha/"
        f"{m} at the look where it stopped) holds the true mean d, which must be at least {1 - alpha / m:.3f}; joint "
        f"coverage, all {m} at once (at least {1 - alpha:.2f}). Within margin: whether the true |d| is under the "
        "margin times the true gain, where an equivalence verdict is right. Trajectories: the expected number each "
        "group ran (a group runs until all its comparisons are decided), and their total "
        f"(the fixed design at the cap: {len(data['groups']) * data['schedule']['cap']}).",
    ]
    if ridged:
        out += ["", f"The correlation of {', '.join(ridged)} was singular (fewer shared trajectories than components, "
                f"or comparisons sharing an arm): a ridge of {RIDGE:g} was added to its diagonal."]  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.studies.probe_design")
    ap.add_argument("--probe", default="results/probes/embedded", help="a probe's folder, holding its report.json")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    if args.sims < 100:
        raise CreditBenchError(f"--sims must be >= 100 for an error rate worth stating, got {args.sims}")
    report = load(args.probe)
    o = report["options"]
    schedule = SequentialSpec(o["first"], o["step"], o["cap"], o["spending"])
    family = groups(report)
    names = list(dict.fromkeys(r["comparison"] for r in report["comparisons"]))  # the family's order
    start = time.perf_counter()
    results = {
        name: simulate(family, names, schedule, o["alpha"], o["margin"], shrink, args.sims, args.seed)
        for name, shrink in SCENARIOS.items()
    }
    data = {
        "command": "python -m bench.studies.probe_design " + " ".join(argv if argv is not None else sys.argv[1:]),
        "probe": str(args.probe),
        "schedule": {
            "first": schedule.first,
            "step": schedule.step,
            "cap": schedule.cap,
            "spending": schedule.spending,
            "looks": list(schedule.looks),
        },  # fmt: skip
        "alpha": o["alpha"],
        "margin": o["margin"],
        "sims": args.sims,
        "seed": args.seed,
        "groups": [_describe(g) for g in family],
        "results": results,
        "wall_s": time.perf_counter() - start,
    }
    data["targets"] = targets(report)
    data["notes"] = notes(data)
    md, js = write_outputs(args.out, "probe_design", markdown(data), data)
    print(f"wrote {md} and {js}")


def _describe(g: Group) -> dict[str, Any]:
    """A group's fitted model as the json keeps it (the correlation's factor is left out)."""
    comps = [{"diff": float(g.mean[2 * j]), "sd_diff": float(g.sd[2 * j]), "gain": float(g.mean[2 * j + 1]),
              "sd_gain": float(g.sd[2 * j + 1])} for j in range(len(g.names))]  # fmt: skip
    return {"reference": g.reference, "names": g.names, "trajectories": g.trajectories, "ridged": g.ridged,
            "comparisons": comps}  # fmt: skip


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.probe_design")
