"""Credit per update: the statistics of a credit probe's raw records (bench.paired).

For a pair (a credit method M and its control C: its twin or placebo) at a setting -- a common rate
(both at lr), or ``tuned`` (each at its own tuned rate) -- every checkpoint c and batch b give one paired
difference of one update's gain in J, in points:

    d(c, b) = dJ_M(c, b) - dJ_C(c, b)        dJ_a(c, b) = 100 (J(theta_a) - J(theta_c))

Pooled over the checkpoints (strata, equal weights) the effect is the mean of the checkpoint means, with
SE = sqrt(sum_c s_c^2 / n_c) / C and sum_c (n_c - 1) degrees of freedom (a Student-t interval); each
pair uses its own variance. Its size relative to the control's own gain is d / mean dJ_C, the interval
likewise; the target of a probe is a relative half-width of 10% or less. p-values are two-sided t tests,
Holm-adjusted within the family of one setting (every pair compared there). The MDE is the paired one of
bench.stats.power.mde at the design's batches. The inference is conditional on the reference
trajectories' checkpoints: a batch, not a training seed, is the unit here, which is why this measures one
update's effect and not a run's (docs/results.md sets the two side by side).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.atomic import write_atomic
from bench.paired.stats import Unit, index, settings, stratified, stratum_mean
from bench.report.comparisons import where
from bench.report.inference import row_pairs
from bench.stats import format as fmt
from bench.stats.family import holm
from bench.stats.power import mde


def comparisons(probe: dict[str, Any], power: float = 0.8) -> list[dict[str, Any]]:
    """Every pair at every setting: the paired difference per update, pooled and per phase, its size
    relative to the control's gain, Holm within each setting, the MDE."""
    plan = probe["plan"]
    dj = index(probe["updates"], "dj")
    out = []
    for name, rate in settings(plan):
        family = []
        for p in plan["pairs"]:
            m, c = (p["method"], rate[p["method"]]), (p["control"], rate[p["control"]])
            units = sorted(set(dj[m]) & set(dj[c]))
            if not units:
                continue
            diffs = {u: dj[m][u] - dj[c][u] for u in units}
            gain = stratum_mean({u: dj[c][u] for u in units})
            row = {"setting": name, **p, "lr_method": m[1], "lr_control": c[1], "gain_method":
                   stratum_mean({u: dj[m][u] for u in units}), "gain_control": gain, **stratified(diffs)}  # fmt: skip
            rel = sorted(row[k] / gain if gain else math.nan for k in ("lo", "hi"))  # a loss flips the order
            row["relative"] = {"mean": row["mean"] / gain if gain else math.nan, "lo": rel[0], "hi": rel[1]}
            row["relative_half_width"] = (row["hi"] - row["lo"]) / 2 / abs(gain) if gain else math.inf
            sd = row["se"] * math.sqrt(row["n"])
            row["mde"] = mde(sd, row["n"], max(row["df"], 1), m=1, power=power, paired=True)
            row["phases"] = _phases(diffs)
            family.append(row)
        for row, ph in zip(family, holm([r["p"] for r in family])):
            row["p_holm"] = ph
        out += family
    return out


def _phases(diffs: dict[Unit, float]) -> dict[str, dict[str, Any]]:
    by: dict[float, dict[Unit, float]] = defaultdict(dict)
    for u, d in diffs.items():
        by[u.phase][u] = d
    return {f"{phase:g}": stratified(ds) for phase, ds in sorted(by.items())}


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
    """Each pair at each common rate and step k of the segments: the paired difference of J's gain since
    the checkpoint, and the fraction of samples the two arms still share."""
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
                diffs = {u: dj[m][u] - dj[c][u] for u in units}
                shared = float(np.mean([shared_fraction(rows[m][u], rows[c][u]) for u in units]))
                out.append({"lr": lr, **p, "k": k, "shared": shared, **stratified(diffs),
                            "gain_control": stratum_mean({u: dj[c][u] for u in units})})  # fmt: skip
    return out


def end_to_end(probe: dict[str, Any], sweep_report: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sweep's own verdicts for the probe's pairs (its credit family, final pass@1 over training seeds
    at the tuned rates), in points, to set beside the per-update effects: each pair of the probe's
    ``credit_controls`` on the probe's model and task that the family compared; [] without a sweep report."""
    credit = ((sweep_report or {}).get("analysis") or {}).get("credit")
    rows = _credit_rows(credit["assessment"]) if credit else {}
    on = where(probe["model"], probe["task"])
    out = []
    for m, cs in (probe["plan"].get("credit_controls") or {}).items():
        for c in cs:
            r = rows.get((m, c, on))
            if r is None:  # a label without runs: the family has no row for the pair
                continue
            out.append({"method": m, "control": c, "diff": 100 * r["diff"]["value"], "lo": 100 * r["diff"]["lo"],
                        "hi": 100 * r["diff"]["hi"], "p_holm": r["p_holm"], "verdict": r["verdict"]})  # fmt: skip
    return out


def _credit_rows(assessment: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The credit family's rows by pair: (method, control, "task (model)")."""
    return {(label, control, on): row for label, control, on, row, _ in row_pairs(assessment) if row is not None}


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
        "comparisons": comparisons(probe),
        "arms": arms(probe),
        "segments": segments(probe),
        "end_to_end": end_to_end(probe, sweep_report),
        "wall_s": probe["wall_s"],
        "jobs": probe["jobs"],
    }


def read(results_dir, sweep: str) -> dict[str, Any] | None:
    """The report of the sweep's credit probe (results/probes/<sweep>/report.json), None without one."""
    from bench.sweep.sweep import probe_dir

    path = probe_dir(results_dir, sweep) / "report.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _ci(r: dict[str, Any]) -> str:
    return fmt.interval(r["mean"], r["lo"], r["hi"], "+.2f")


def markdown(rep: dict[str, Any]) -> str:
    """The "Credit per update" tables: each pair at each setting, then the segments."""
    o = rep["options"]
    ckpts = ", ".join(f"{p:g}" for p in sorted({c["phase"] for c in rep["checkpoints"]}))
    lines = [
        f"Paired updates on {rep['task']} ({rep['model']}): {rep['batches']} batches on "
        f"{len(rep['checkpoints'])} checkpoints (phases of the budget: {ckpts}; reference: {o['reference']}, "
        f"seeds {', '.join(map(str, o['reference_seeds']))}), {rep['wall_s'] / 60:.1f} min of wall time on "
        f"{rep['jobs']} process(es). dJ: one update's gain in J, points of strict pass@1.",
        "",
        "| method | control | setting | dJ method | dJ control | difference [95% CI] | relative to control's dJ "
        "| p_Holm | MDE | by phase |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["comparisons"]:
        rel = r["relative"]
        lr = r["setting"] if r["setting"] != "tuned" else f"tuned ({r['lr_method']:g} vs {r['lr_control']:g})"
        lines.append(
            f"| {r['method']} | {r['control']} | {lr} | {r['gain_method']:.2f} | {r['gain_control']:.2f} | "
            f"{_ci(r)} | {100 * rel['mean']:+.1f}% [{100 * rel['lo']:+.1f}, {100 * rel['hi']:+.1f}] | "
            f"{fmt.p_value(r['p_holm'])} | {r['mde']:.2f} | "
            + ", ".join(f"{ph}: {x['mean']:+.2f}" for ph, x in r["phases"].items())
            + " |"
        )
    lines += _beside(rep)
    lines += ["", "Each arm's update: its mean gain dJ, the first-order gain grad J . d theta (points), the cosine "
              "of d theta with grad J, and where its credit goes on failed completions (the blame token's share "
              "of |credit|, against uniform's; the blame token's rank, 0 first, 0.5 chance).", "",
              "| label | lr | dJ | grad J . d theta | cos | blame share (uniform) | blame rank | skipped |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for a in rep["arms"]:
        share = "–" if a["blame_share"] is None else f"{a['blame_share']:.3f} ({a['blame_uniform_share']:.3f})"
        rank = "–" if a["blame_rank_frac"] is None else f"{a['blame_rank_frac']:.2f}"
        lines.append(
            f"| {a['label']} | {a['lr']:g} | {a['dj']:.2f} | {a['first_order']:.2f} | {a['cos']:.3f} | {share} | "
            f"{rank} | {a['skipped']} |"
        )
    if rep["segments"]:
        lines += ["", "Segments of K updates (common random numbers): the difference of J's gain since the "
                  "checkpoint after k updates, and the share of samples the two arms still draw alike.", "",
                  "| method | control | lr | k | difference [95% CI] | dJ control | samples shared |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for s in rep["segments"]:
            lines.append(
                f"| {s['method']} | {s['control']} | {s['lr']:g} | {s['k']} | {_ci(s)} | {s['gain_control']:.2f} | "
                f"{100 * s['shared']:.0f}% |"
            )
    return "\n".join(lines) + "\n"


def _beside(rep: dict[str, Any]) -> list[str]:
    """Per update beside end to end: each pair's per-update difference at the tuned rates and at each common
    rate, its K-step difference at the largest K, and the sweep's end-to-end difference (tuned rates)."""
    if not rep["end_to_end"]:
        return []
    settings = list(dict.fromkeys(c["setting"] for c in rep["comparisons"]))
    last_k = max((s["k"] for s in rep["segments"]), default=None)
    head = ["method", "control", *(f"per update, {s}" for s in settings)]
    head += [f"{last_k} updates, lr {lr:g}" for lr in rep["options"]["lrs"]] if last_k else []
    head += ["end to end (final pass@1, tuned)", "end-to-end verdict"]
    lines = ["", "Per update beside end to end (points; per update: of J, end to end: of sampled pass@1 over "
             "training seeds):", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
    measured = {(c["method"], c["control"]) for c in rep["comparisons"]}
    for e in [e for e in rep["end_to_end"] if (e["method"], e["control"]) in measured]:
        cells = [e["method"], e["control"]]
        for s in settings:
            rows = [
                c
                for c in rep["comparisons"]
                if (c["method"], c["control"], c["setting"]) == (e["method"], e["control"], s)
            ]
            cells.append(_ci(rows[0]) if rows else "–")
        for lr in rep["options"]["lrs"] if last_k else []:
            seg = [
                x
                for x in rep["segments"]
                if (x["method"], x["control"], x["lr"], x["k"]) == (e["method"], e["control"], lr, last_k)
            ]
            cells.append(_ci(seg[0]) if seg else "–")
        cells += [fmt.interval(e["diff"], e["lo"], e["hi"], "+.1f"), e["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write(rep: dict[str, Any], out: Path) -> None:
    """A credit probe's report files in ``out``: report.json, report.md and per_update.png."""
    write_atomic(out / "report.json", json.dumps(rep, indent=1) + "\n")
    write_atomic(out / "report.md", markdown(rep))
    figure(rep, out / "per_update.png")


def figure(rep: dict[str, Any], path) -> None:
    """Per pair: each arm's gain per update against the rate, and the paired difference with its interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [(c["method"], c["control"]) for c in rep["comparisons"] if c["setting"] != "tuned"]
    pairs = list(dict.fromkeys(pairs))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 3.2), squeeze=False)
    for ax, (m, c) in zip(axes[0], pairs):
        rows = [r for r in rep["comparisons"] if (r["method"], r["control"]) == (m, c) and r["setting"] != "tuned"]
        lrs = [r["lr_method"] for r in rows]
        ax.plot(lrs, [r["gain_method"] for r in rows], "o-", label=m)
        ax.plot(lrs, [r["gain_control"] for r in rows], "s--", label=c)
        ax.errorbar(lrs, [r["mean"] for r in rows], yerr=[[r["mean"] - r["lo"] for r in rows],
                    [r["hi"] - r["mean"] for r in rows]], fmt="k^", capsize=3, label="difference")  # fmt: skip
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("dJ per update (points)")
        ax.set_title(f"{m} vs {c}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
