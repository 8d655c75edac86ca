"""The credit probe's report files (bench.report.per_update computes what they hold): report.json,
report.md (each pair at each setting with its verdict, the readings by rule, per update beside end to end,
the arms, the segments) and per_update.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.atomic import write_atomic
from bench.stats import format as fmt


def _ci(r: dict[str, Any]) -> str:
    return fmt.interval(r["mean"], r["lo"], r["hi"], "+.2f")


def _ratio(r: dict[str, Any]) -> str:
    rel = r["relative"]
    if rel is None:  # the control's gain is not resolved above 0 at this critical value: no ratio
        return fmt.DASH
    return f"{100 * rel['mean']:+.1f}% [{100 * rel['lo']:+.1f}, {100 * rel['hi']:+.1f}]"


def markdown(rep: dict[str, Any]) -> str:
    """The "Credit per update" tables: each pair at each setting and its reading, beside end to end, the
    arms, then the segments."""
    o = rep["options"]
    ckpts = ", ".join(f"{p:g}" for p in sorted({c["phase"] for c in rep["checkpoints"]}))
    trajectories = len({(c["reference"], c["seed"]) for c in rep["checkpoints"]})
    references = len({c["reference"] for c in rep["checkpoints"]})
    m = len({r["comparison"] for r in rep["comparisons"] if r["kind"] != "oracle"})
    ceiling = len({r["comparison"] for r in rep["comparisons"] if r["kind"] == "oracle"})
    lines = [
        f"Paired updates on {rep['task']} ({rep['model']}): {rep['batches']} batches, {o['batches']} at each of "
        f"{len(rep['checkpoints'])} checkpoints (phases of the budget: {ckpts}) of {trajectories} trajectories "
        f"of {references} reference label(s) (reference: {o['reference']}; per pair in rounds of {o['first']}, "
        f"then {o['step']} more for the undecided pairs, at most {o['cap']}), {rep['wall_s'] / 60:.1f} min of "
        f"wall time on {rep['jobs']} "
        "process(es). dJ: one update's gain in J, points of strict pass@1, averaged over trajectories.",
        "",
        f"The trajectories are the sampled units. Verdicts: {o['spending']} alpha spending over the rounds at "
        f"alpha {o['alpha']:g} with Holm's recycling across the {m} comparisons; equivalent: within "
        f"±{100 * o['margin']:g}% of the control's gain by two one-sided tests. Intervals: repeated 95% confidence "
        "intervals at the look where each comparison stopped (valid after the sequential stop, simultaneous over "
        f"the family at alpha / {m}: a verdict made at Holm's recycled level can stand where it still reaches 0); the "
        "ratio to the control's gain is Fieller's at the same critical value (– where that gain "
        "is not resolved above 0). By phase: each phase across trajectories, 95%, unadjusted."
        + (
            f" The oracles against their twins (the ceiling) are a family of their own, {ceiling} comparisons, decided "
            "by the same rules."
            if ceiling
            else ""
        ),
        "",
        "| method | control | setting | trajectories | dJ method | dJ control | difference [repeated 95% CI] "
        "| relative to control's dJ | verdict | MDE | by phase |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["comparisons"]:
        lr = r["setting"] if r["setting"] != "tuned" else f"tuned ({r['lr_method']:g} vs {r['lr_control']:g})"
        phases = ", ".join(f"{ph}: {_ci(x)}" for ph, x in r["phases"].items())
        lines.append(
            f"| {r['method']} | {r['control']} | {lr} | {r['n']} | {r['gain_method']:.2f} | {r['gain_control']:.2f} | "
            f"{_ci(r)} | {_ratio(r)} | {r['verdict']} | {r['mde']:.2f} | {phases} ({r['phase_words']}) |"
        )
    lines += _head(
        "The readings, by rule (bench.stats.words): each pair's verdicts across the common rates.",
        ["method", "control", "per update"],
    )
    lines += [f"| {x['method']} | {x['control']} | {x['rates']} |" for x in rep["readings"]]
    lines += _beside(rep)
    lines += _head(
        "Each arm's update: its mean gain dJ, the first-order gain grad J . d theta (points), the cosine "
        "of d theta with grad J, and where its credit goes on failed completions (the blame token's share "
        "of |credit|, against uniform's; the blame token's rank, 0 first, 0.5 chance).",
        ["label", "lr", "dJ", "grad J . d theta", "cos", "blame share (uniform)", "blame rank", "skipped"],
    )
    for a in rep["arms"]:
        share = "–" if a["blame_share"] is None else f"{a['blame_share']:.3f} ({a['blame_uniform_share']:.3f})"
        rank = "–" if a["blame_rank_frac"] is None else f"{a['blame_rank_frac']:.2f}"
        lines.append(
            f"| {a['label']} | {a['lr']:g} | {a['dj']:.2f} | {a['first_order']:.2f} | {a['cos']:.3f} | {share} | "
            f"{rank} | {a['skipped']} |"
        )
    lines += _ceiling(rep)
    if rep["segments"]:
        lines += _head(
            "Segments of K updates (common random numbers): the difference of J's gain since the "
            "checkpoint after k updates across trajectories (95%, unadjusted), and the share of samples "
            "the two arms still draw alike.",
            ["method", "control", "lr", "k", "difference [95% CI]", "dJ control", "samples shared"],
        )
        for s in rep["segments"]:
            lines.append(
                f"| {s['method']} | {s['control']} | {s['lr']:g} | {s['k']} | {_ci(s)} | {s['gain_control']:.2f} | "
                f"{100 * s['shared']:.0f}% |"
            )
    return "\n".join(lines) + "\n"


def _ceiling(rep: dict[str, Any]) -> list[str]:
    """The credit ceiling (bench.report.oracle): each method's effect as a share of its twin's oracle's, and
    each label's credit against the true advantages beside its gain; nothing for a probe without oracle arms."""
    lines: list[str] = []
    if rep.get("oracle"):
        lines += _head(
            "The credit ceiling: each method's effect over its twin as a share of the twin's oracle's (the twin's "
            "credit moved onto the Monte-Carlo step advantages, the same mass), on the batches all three updated "
            "on; Fieller's interval, Bonferroni over the shares (– where the oracle's gain over the twin is not "
            "resolved above 0).",
            ["method", "twin", "setting", "trajectories", "method - twin", "oracle - twin [CI]", "share of the oracle"],
        )
        for r in rep["oracle"]:
            sh = r["share"]
            share = fmt.percent(sh)
            oracle = (
                fmt.interval(r["oracle_effect"], r["oracle_lo"], r["oracle_hi"], "+.2f")
                if "oracle_lo" in r
                else f"{r['oracle_effect']:+.2f}"
            )
            lines.append(
                f"| {r['method']} | {r['twin']} | {r['setting']} | {r['n']} | {r['method_effect']:+.2f} | {oracle} | "
                f"{share} |"
            )
    if rep.get("quality"):
        lines += _head(
            "Credit against the true advantage (bench.engine.credit_quality), on the batches that measure it: "
            "Spearman's rho of the effective credit with the Monte-Carlo step advantage within a completion; the "
            "share of a failed (correct) completion's negative (positive) credit on its lowest (highest) step, "
            "uniform's beside; each label's dJ per update beside.",
            ["label", "lr", "dJ", "rank corr", "worst-step share (uniform)", "best-step share (uniform)", "batches"],
        )

        def pair(a, b) -> str:
            return fmt.DASH if a is None else f"{a:.3f} ({b:.3f})"

        for q in rep["quality"]:
            rho = fmt.DASH if q["rank_corr"] is None else f"{q['rank_corr']:+.3f}"
            lines.append(
                f"| {q['label']} | {q['lr']:g} | {q['dj']:.2f} | {rho} | {pair(q['worst_share'], q['worst_uniform'])} "
                f"| {pair(q['best_share'], q['best_uniform'])} | {q['batches']} |"
            )
    return lines


def _head(intro: str, columns: list[str]) -> list[str]:
    """A table's lead-in paragraph and its header rows."""
    return ["", intro, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _beside(rep: dict[str, Any]) -> list[str]:
    """Per update beside end to end: each pair's per-update difference at the tuned rates and at each common
    rate, its K-step difference at the largest K, and the sweep's end-to-end difference (tuned rates)."""
    if not rep["end_to_end"]:
        return []
    settings = list(dict.fromkeys(c["setting"] for c in rep["comparisons"]))
    last_k = max((s["k"] for s in rep["segments"]), default=None)
    head = ["method", "control", *(f"per update, {s}" for s in settings)]
    head += [f"{last_k} updates, lr {lr:g}" for lr in rep["options"]["lrs"]] if last_k else []
    shown = {e.get("interval", "95% CI") for e in rep["end_to_end"]}
    head += [f"end to end (final pass@1, tuned; {' / '.join(sorted(shown))})", "end-to-end verdict"]
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
