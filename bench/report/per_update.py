"""Credit per update: the statistics of a credit probe's raw records (bench.paired).

For a pair (a credit method M and its control C: its twin or placebo) at a setting -- a common rate
(both at lr), or ``tuned`` (each at its own tuned rate) -- every batch b drawn at checkpoint c of
reference trajectory t gives one paired difference of one update's gain in J, in points:

    d(t, c, b) = dJ_M(t, c, b) - dJ_C(t, c, b)        dJ_a = 100 (J(theta_a) - J(theta_c))

The claim is about updates during training, so the sampled units are the trajectories (training seeds)
and, within each, its checkpoints (the phases of the budget) and batches: each trajectory's value is the
mean over its checkpoints of their mean differences, and the headline estimate, SE and degrees of
freedom (T - 1) are those of the T trajectory values (bench.stats.paired.nested: the random-effects
model's exact inference for a balanced design). Each pair uses its own variance.

Trajectories come in rounds (``first``, then ``step`` more for the pairs with a comparison still open,
up to ``cap``); after each round every open comparison -- every pair at every distinct rate, one family
-- is tested against group-sequential boundaries (bench.report.sequential.analyse: alpha spending, Holm's
recycling across the family; equivalence within ±``margin`` of the control's own gain by two one-sided
tests of d_t + margin g_t and margin g_t - d_t). The interval printed is the repeated confidence interval
at the look where the comparison stopped (valid after a sequential stop, simultaneous over the family at
alpha / m), and the ratio to the control's gain is Fieller's interval at the same critical value, printed
only where the control's gain is resolved above 0 (bench.stats.ratio). Per phase, the differences across
trajectories are conditional detail (95%, unadjusted). The MDE is the paired one of bench.stats.power.mde
at the trajectories used, Bonferroni over the family. The words come from the rules of bench.stats.words.

A comparison is **within the target** (the credit table's, one rule: :func:`within_target`) where its
repeated interval's half-width is at most ``RELATIVE`` of the control's gain, or ``ABSOLUTE`` points of J
where the control gains less than ``SMALL_GAIN`` points. A probe with ``until: resolved`` stops a pair's
rounds once each of its comparisons is decided or within the target; one stopped undecided says
``undecided (resolved)`` (its repeated interval is valid at any stop, so it is the one printed).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import numpy as np

from bench.paired.stats import Unit, index, nested, per_trajectory, settings, stratum_mean
from bench.report import oracle
from bench.report.comparisons import where
from bench.report.inference import row_pairs
from bench.report.sequential import Sequential, analyse
from bench.stats import words
from bench.stats.paired import summarize
from bench.stats.power import mde
from bench.stats.ratio import fieller
from bench.stats.verdict import Outcome, Verdict
from bench.sweep.schedule import SequentialSpec

RELATIVE, ABSOLUTE, SMALL_GAIN = 0.10, 0.3, 3.0
"""Within the target: a half-width of at most RELATIVE of the control's gain, or ABSOLUTE points of J where
the control gains less than SMALL_GAIN points."""


def within_target(lo: float, hi: float, gain: float) -> bool:
    """The rule of the module docstring for a comparison's interval [lo, hi] and its control's gain."""
    gain = abs(gain)
    return (hi - lo) / 2 <= (ABSOLUTE if gain < SMALL_GAIN else RELATIVE * gain)


def _stopped(d, gain: float, until: str) -> bool:
    """Whether an open decision ``d`` is one a probe with ``until`` stops (undecided, within the target)."""
    return (
        until == "resolved"
        and d.verdict.outcome is Outcome.OPEN
        and d.lo is not None
        and within_target(d.lo, d.hi, gain)
    )


def _gain(cell: dict[str, Any], n: int) -> float:
    """The control's mean gain over a cell's first ``n`` trajectories."""
    return float(np.mean(list(cell["series"]["control"].values())[:n]))


def _schedule(options: dict[str, Any]) -> SequentialSpec:
    return SequentialSpec(first=options["first"], step=options["step"], cap=options["cap"],
                          spending=options["spending"])  # fmt: skip


def _name(p: dict[str, Any], lr_m: float, lr_c: float) -> str:
    """A comparison's name in the family: the pair and its rates."""
    rates = f"{lr_m:g}" if lr_m == lr_c else f"{lr_m:g} vs {lr_c:g}"
    return f"{p['method']} vs {p['control']} @ {rates}"


def _cells(probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pair at every setting with its records: (setting, pair, rates, the units both arms hold, and
    the per-trajectory values of the difference and of each arm's gain, in the rounds' order)."""
    plan = probe["plan"]
    order = list(plan["options"]["reference_seeds"])
    dj = index(probe["updates"], "dj")
    out = []
    for setting, rate in settings(plan):
        for p in plan["pairs"]:
            m, c = (p["method"], rate[p["method"]]), (p["control"], rate[p["control"]])
            units = sorted(set(dj[m]) & set(dj[c]))
            if not units:
                continue
            diffs = {u: dj[m][u] - dj[c][u] for u in units}
            series = {k: per_trajectory(v, order) for k, v in
                      (("diff", diffs), ("method", {u: dj[m][u] for u in units}),
                       ("control", {u: dj[c][u] for u in units}))}  # fmt: skip
            out.append({"setting": setting, "pair": p, "rates": (m[1], c[1]), "name": _name(p, m[1], c[1]),
                        "diffs": diffs, "series": series})  # fmt: skip
    return out


def family(probe: dict[str, Any], ceiling: bool = False) -> Sequential:
    """The probe's family of comparisons (every pair at every distinct rate) decided in rounds; with
    ``ceiling``, the oracles against their twins instead, a family of their own (the ceiling is another
    question: the credit methods' verdicts are the ones they are without it)."""
    o = probe["plan"]["options"]
    cells = {c["name"]: c for c in _cells(probe) if (c["pair"]["kind"] == "oracle") == ceiling}
    diffs = {n: list(c["series"]["diff"].values()) for n, c in cells.items()}
    gains = {n: list(c["series"]["control"].values()) for n, c in cells.items()}
    return analyse(diffs, _schedule(o), o["alpha"], o["margin"], scale=gains)


def _has_oracle(plan: dict[str, Any]) -> bool:
    return any(p["kind"] == "oracle" for p in plan["pairs"])


def needs(probe: dict[str, Any]) -> dict[str, int]:
    """The trajectories each reference label needs next: the next look's for a pair with a comparison
    still open, what it has for the others."""
    plan = probe["plan"]
    schedule = _schedule(plan["options"])
    until = plan["options"].get("until", "decided")
    cells = {c["name"]: c for c in _cells(probe)}
    out: dict[str, int] = {}
    for d in [*family(probe).decisions, *(family(probe, ceiling=True).decisions if _has_oracle(plan) else [])]:
        ref = plan["references"][cells[d.name]["pair"]["method"]]
        more = d.verdict.outcome is Outcome.OPEN and not _stopped(d, _gain(cells[d.name], d.seeds), until)
        n = schedule.next_look(d.seeds) if more else d.seeds
        out[ref] = max(out.get(ref, 0), n)
    return out


def comparisons(probe: dict[str, Any], power: float = 0.8) -> list[dict[str, Any]]:
    """Every pair at every setting: its verdict in rounds, the trajectory-level difference per update with
    its repeated interval, Fieller's ratio to the control's gain, the per-phase detail and the MDE."""
    o = probe["plan"]["options"]
    families = [family(probe), *([family(probe, ceiling=True)] if _has_oracle(probe["plan"]) else [])]
    decisions = {d.name: (d, len(f.decisions)) for f in families for d in f.decisions}
    out = []
    for cell in _cells(probe):
        d, m_family = decisions[cell["name"]]
        seeds = list(cell["series"]["diff"])[: d.seeds]
        x = np.array([cell["series"]["diff"][s] for s in seeds])
        g = np.array([cell["series"]["control"][s] for s in seeds])
        gm = np.array([cell["series"]["method"][s] for s in seeds])
        s = summarize(x) if len(x) >= 2 else None
        q = d.critical if d.critical is not None else math.inf  # the decision's repeated interval (alpha / m)
        p = cell["pair"]
        verdict, why = str(d.verdict), d.why
        if _stopped(d, float(g.mean()), o.get("until", "decided")):
            verdict = str(Verdict(Outcome.RESOLVED))
            why = f"stopped at {len(x)} trajectories, its repeated interval within the target (until: resolved)"
        row = {"setting": cell["setting"], **p, "comparison": cell["name"], "lr_method": cell["rates"][0],
               "lr_control": cell["rates"][1], "gain_method": float(gm.mean()), "gain_control": float(g.mean()),
               "mean": float(x.mean()), "se": s.se if s else math.inf, "df": s.df if s else 0, "n": len(x),
               "batches": sum(1 for u in cell["diffs"] if u.seed in seeds), "critical": q,
               "verdict": verdict, "look": d.look, "why": why}  # fmt: skip
        half = q * row["se"] if s else math.inf
        row["lo"], row["hi"] = (d.lo, d.hi) if d.lo is not None else (-math.inf, math.inf)
        row["p"] = s.p() if s else 1.0
        r = fieller(x, g, q) if s and math.isfinite(q) and g.mean() > 0 else None  # a gain resolved above 0
        row["relative"] = None if r is None else {"mean": r.estimate, "lo": r.lo, "hi": r.hi}
        row["relative_half_width"] = half / abs(row["gain_control"]) if row["gain_control"] else math.inf
        row["mde"] = mde(s.sd, len(x), len(x) - 1, o["alpha"], m_family, power, paired=True) if s else math.inf
        row["phases"] = _phases({u: v for u, v in cell["diffs"].items() if u.seed in seeds})
        row["phase_words"] = words.phases({k: (v["lo"], v["hi"]) for k, v in row["phases"].items()})
        row["trajectories"] = {"seeds": seeds, "diff": x.tolist(), "method": gm.tolist(), "control": g.tolist()}
        out.append(row)
    return out


def _phases(diffs: dict[Unit, float]) -> dict[str, dict[str, Any]]:
    """Each phase's difference across trajectories (its checkpoints' means; a 95% interval, unadjusted)."""
    by: dict[float, dict[Unit, float]] = defaultdict(dict)
    for u, d in diffs.items():
        by[u.phase][u] = d
    out = {}
    for phase, ds in sorted(by.items()):
        s = nested(ds)
        half = s.half()
        out[f"{phase:g}"] = {"mean": s.mean, "se": s.se, "lo": s.mean - half, "hi": s.mean + half, "n": s.n}
    return out


def readings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's verdicts across the common rates in words (bench.stats.words.across)."""
    out: dict[tuple, dict[str, str]] = {}
    for r in rows:
        if r["setting"] != "tuned":
            out.setdefault((r["method"], r["control"]), {})[f"{r['lr_method']:g}"] = r["verdict"]
    return [{"method": m, "control": c, "rates": words.across(v)} for (m, c), v in out.items()]


def arms(probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Each arm's mean gain in J per update, first-order improvement grad J . d theta, cosine and step."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in probe["updates"]:
        groups[(r["label"], r["lr"])].append(r)
    return [
        {
            "label": label,
            "lr": lr,
            "n": len(rs),
            **{k: _by_checkpoint(rs, k) for k in ("dj", "first_order", "cos", "step_norm")},
            **{k: _mean([r.get(k) for r in rs]) for k in BLAME},
            "skipped": int(sum(r["skipped"] for r in rs)),
        }
        for (label, lr), rs in sorted(groups.items())
    ]


def _by_checkpoint(records: list[dict[str, Any]], key: str) -> float:
    return stratum_mean({Unit.of(r): r[key] for r in records})


BLAME = ("blame_share", "blame_uniform_share", "blame_rank_frac")


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept else None


def segments(probe: dict[str, Any]) -> list[dict[str, Any]]:
    """Each pair at each common rate and step k of the segments: the difference of J's gain since the
    checkpoint across trajectories (a 95% interval, unadjusted), and the fraction of samples the two arms
    still share."""
    from bench.paired.segment import shared_fraction

    if not probe["segments"]:
        return []
    plan = probe["plan"]
    dj, rows = index(probe["segments"], "dj"), index(probe["segments"], "rows")
    out = []
    for lr in plan["options"]["lrs"]:
        for p in plan["pairs"]:
            m, c = (p["method"], lr), (p["control"], lr)
            for k in sorted({u.k for u in dj[m]}):
                units = [u for u in sorted(set(dj[m]) & set(dj[c])) if u.k == k]
                s = nested({u: dj[m][u] - dj[c][u] for u in units})
                half = s.half()
                shared = float(np.mean([shared_fraction(rows[m][u], rows[c][u]) for u in units]))
                out.append({"lr": lr, **p, "k": k, "shared": shared, "mean": s.mean, "se": s.se, "df": s.df,
                            "n": s.n, "lo": s.mean - half, "hi": s.mean + half,
                            "gain_control": stratum_mean({u: dj[c][u] for u in units})})  # fmt: skip
    return out


def end_to_end(probe: dict[str, Any], sweep_report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sweep's own verdicts for the probe's pairs (its credit family, final pass@1 over training seeds
    at the tuned rates), in points, to set beside the per-update effects: each pair of the probe's
    ``credit_controls`` on the probe's model and task that the family compared; [] without a sweep report.
    ``interval`` names the interval: a family decided in rounds gives its repeated one."""
    credit = ((sweep_report or {}).get("analysis") or {}).get("credit")
    rows = _credit_rows(credit) if credit else {}
    on = where(probe["model"], probe["task"])
    out = []
    for m, cs in (probe["plan"].get("credit_controls") or {}).items():
        for c in cs:
            r = rows.get((m, c, on))
            if r is None or r["diff"].get("lo") is None:  # no runs of a label, or too few seeds for an interval
                continue
            out.append({"method": m, "control": c, "diff": 100 * r["diff"]["value"], "lo": 100 * r["diff"]["lo"],
                        "hi": 100 * r["diff"]["hi"], "interval": r["interval"], "p_holm": r["p_holm"],
                        "verdict": r["verdict"]})  # fmt: skip
    return out


def _credit_rows(credit: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The credit family's rows by pair: (method, control, "task (model)"), with the name of their
    ``interval``; in a family decided in rounds each difference and verdict is its decision's, with the
    repeated interval valid after the sequential stop (report.json's ``credit.repeated``), not the
    fixed-design one."""
    repeated = credit.get("repeated") or {}
    by = {(r["method"], r["control"], r["task"]): r for r in repeated.get("rows", [])}
    out = {}
    for label, control, on, row, _ in row_pairs(credit["assessment"]):
        if row is not None:
            r = by.get((label, control, on))
            shown = {"diff": r, "interval": repeated["label"], "verdict": r["verdict"]} if r else {"interval": "95% CI"}
            out[(label, control, on)] = row | shown
    return out


def report(probe: dict[str, Any], sweep_report: dict[str, Any] | None = None) -> dict[str, Any]:
    """The probe's report: the comparisons, the arms, the segments, the sweep's end-to-end verdicts for
    the same pairs, where it ran and how long."""
    return {
        "sweep": probe["plan"]["sweep"],
        "task": probe["task"],
        "model": probe["model"],
        "options": probe["plan"]["options"],
        "checkpoints": probe["checkpoints"],
        "batches": len({Unit.of(r) for r in probe["updates"]}),
        "comparisons": (rows := comparisons(probe)),
        "readings": readings(rows),
        "rounds": probe.get("rounds", []),
        "arms": arms(probe),
        "segments": segments(probe),
        "end_to_end": end_to_end(probe, sweep_report),
        "oracle": oracle.shares(probe),
        "quality": oracle.quality(probe),
        "wall_s": probe["wall_s"],
        "jobs": probe["jobs"],
    }


def read(results_dir, sweep: str) -> dict[str, Any] | None:
    """The report of the sweep's credit probe (results/probes/<sweep>/report.json), None without one."""
    from bench.sweep.sweep import probe_dir

    path = probe_dir(results_dir, sweep) / "report.json"
    return json.loads(path.read_text()) if path.is_file() else None
