"""Benchmark: what a paired segment of K updates buys over one update, per update spent, from a probe's
own segments (a credit probe run with its options segment_steps K and segment_batches B).

    python -m bench.studies.segment_design PROBE [PROBE ...] [--updates PROBE ...] [--out results/benchmarks]

Where one update barely moves J (a larger policy at its own small rate), a comparison of one update's
gain is as noisy as the gain itself, and no number of trajectories a session can afford resolves a credit
against a tenth of it. A segment lets each arm take K updates from the same checkpoint with common random
numbers (bench.paired.segment): step 1 is a paired update (both arms sample the same batch from the same
weights), and at step k the control's gain g_k has added k updates' worth while the difference d_k
(method minus control, points of J since the checkpoint) keeps what the arms' shared samples cancel.

For each probe, pair, common rate and step k, from the segment records (units: trajectory, checkpoint,
segment): d_k and g_k nested over trajectories (bench.paired.stats.nested, 95%, unadjusted); the SD of a
trajectory's value of d_k (its SE times the square root of the trajectories, at this probe's segments a
trajectory); the fraction of samples the arms still share; the **trajectories for the target**: the fewest
T >= 3 with t(0.975, T - 1) SD / sqrt(T) <= 10% of |g_k| (the credit table's relative target,
bench.report.per_update.RELATIVE); and the **updates for the target**: T times the segments a trajectory
times k updates times the two arms. The last column is the updates k = 1 needs over the updates k needs
(above 1: the segment pays; none for a probe's single updates). One update from the same segments (k = 1)
is the fair baseline: the same checkpoints and trajectories, a paired update of the probe's own kind. A
segment's update draws its own rollout for each arm, where the probe's paired updates share one, so per
update it costs more (the probe's pace constants: bench.paired.probe.PACE_S); the ratio counts updates, not
seconds.

``--updates``: probes whose single paired updates are read the same way (k = 1, one row per pair and common
rate, its batches a trajectory in place of segments): what the same target asks of a probe's own design,
e.g. the credit table's (8 batches at each of 3 checkpoints).

These are pilot figures: an SD from few trajectories is itself uncertain (its degrees of freedom are
printed), so the counts size a design rather than promise it.

Writes ``<out>/segment_design.{md,json}``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from bench.errors import CreditBenchError
from bench.paired.probe import PACE_S
from bench.paired.segment import shared_fraction
from bench.paired.stats import index, nested
from bench.report.per_update import RELATIVE
from bench.script import md_table, run_script, script_parser, write_outputs

MAX_TRAJECTORIES = 10_000
"""Counts above this read "more than" (a gain that is not there asks for any number)."""


def trajectories_for(sd: float, target: float) -> int | None:
    """The fewest trajectories T >= 3 whose 95% t half-width sd * t(0.975, T - 1) / sqrt(T) is at most
    ``target``; None above MAX_TRAJECTORIES."""
    if target <= 0:
        return None
    t = 3
    while t <= MAX_TRAJECTORIES:
        if stats.t.ppf(0.975, t - 1) * sd / math.sqrt(t) <= target:
            return t
        t += 1 if t < 100 else max(1, t // 50)
    return None


def load(folder: str | Path, kind: str = "segments") -> dict[str, Any]:
    path = Path(folder) / "updates.json"
    if not path.is_file():
        raise CreditBenchError(f"{path} not found: give a probe's folder (credit-probe --out)")
    probe = json.loads(path.read_text())
    if kind == "segments" and not probe.get("segments"):
        raise CreditBenchError(
            f"{path} has no segments: run the probe with segments (credit-probe --segment_steps K --segment_batches B)"
        )
    return probe


def rows(probe: dict[str, Any], kind: str = "segments") -> list[dict[str, Any]]:
    """Each pair at each common rate and step k: the statistics of the module docstring (``kind``
    "updates": the probe's single paired updates, k = 1, both arms on each batch)."""
    plan = probe["plan"]
    dj = index(probe[kind], "dj")
    samples = index(probe[kind], "rows") if kind == "segments" else None
    out = []
    for lr in plan["options"]["lrs"]:
        for p in plan["pairs"]:
            m, c = (p["method"], lr), (p["control"], lr)
            base = None
            for k in sorted({u.k or 1 for u in dj[m]}):
                units = [u for u in sorted(set(dj[m]) & set(dj[c])) if (u.k or 1) == k]
                d, g = nested({u: dj[m][u] - dj[c][u] for u in units}), nested({u: dj[c][u] for u in units})
                per = len(units) / d.n
                sd = d.se * math.sqrt(d.n)
                need = trajectories_for(sd, RELATIVE * abs(g.mean))
                updates = None if need is None else need * per * k * 2
                base = updates if k == 1 else base
                crit = stats.t.ppf(0.975, g.df) if g.df > 0 else math.nan
                shared = (
                    1.0 if samples is None else np.mean([shared_fraction(samples[m][u], samples[c][u]) for u in units])
                )
                out.append({
                    "model": probe["model"], "design": kind, "method": p["method"], "control": p["control"],
                    "lr": lr, "k": k, "trajectories": d.n, "df": d.df, "segments_per_trajectory": per,
                    "shared": float(shared),
                    "gain": g.mean, "gain_lo": g.mean - crit * g.se, "gain_hi": g.mean + crit * g.se,
                    "diff": d.mean, "sd_diff": sd, "trajectories_for_target": need, "updates_for_target": updates,
                    "pays": None if samples is None or base is None or updates is None else base / updates,
                })  # fmt: skip
    return out


def _count(x: float | None) -> str:
    return f"> {MAX_TRAJECTORIES:,}" if x is None else f"{x:,.0f}"


def markdown(data: dict[str, Any]) -> str:
    lines = [
        "# Paired segments of K updates against one update: what resolving a tenth of the control's gain costs",
        "",
        f"`{data['command']}`. Per pair, common rate and step k of each probe's segments (or its single updates): "
        "the control's gain g_k "
        "and the difference d_k since the checkpoint (points of J, 95% over trajectories, unadjusted), the SD of "
        "a trajectory's d_k at the probe's segments a trajectory (with its degrees of freedom), the fraction of "
        f"samples the arms still share, the trajectories and updates (both arms) for a 95% half-width of "
        f"{RELATIVE:.0%} of |g_k|, and the updates k = 1 needs over k's (above 1: the segment pays, counting "
        "updates; a segment's update draws its own rollout per arm, about "
        f"{PACE_S['segment_update'] / PACE_S['update']:.1f}x a shared-batch paired update's time at the probe's "
        "pace constants). bench/studies/segment_design.py says how each is computed.",
        "",
    ]
    header = ["model", "units a trajectory", "pair", "lr", "k", "T (df)", "shared", "g_k [95%]", "d_k", "SD of d_k",
              "T for target", "updates for target", "k = 1 / k"]  # fmt: skip
    body = [
        [
            r["model"],
            f"{r['segments_per_trajectory']:g} {'segments' if r['design'] == 'segments' else 'updates'}",
            f"{r['method']} vs {r['control']}",
            f"{r['lr']:g}",
            r["k"],
            f"{r['trajectories']} ({r['df']})",
            f"{r['shared']:.2f}",
            f"{r['gain']:+.3f} [{r['gain_lo']:+.3f}, {r['gain_hi']:+.3f}]",
            f"{r['diff']:+.3f}",
            f"{r['sd_diff']:.3f}",
            _count(r["trajectories_for_target"]),
            _count(r["updates_for_target"]),
            "–" if r["pays"] is None else f"{r['pays']:.1f}x",
        ]  # fmt: skip
        for r in data["rows"]
    ]
    return "\n".join(lines + md_table(header, body)) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.studies.segment_design")
    ap.add_argument("probes", nargs="+", help="probe folders holding updates.json with segments")
    ap.add_argument("--updates", nargs="*", default=[], help="probe folders whose single paired updates are read")
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    data = {
        "command": "python -m bench.studies.segment_design " + " ".join(argv if argv is not None else sys.argv[1:]),
        "relative": RELATIVE,
        "pace_s": PACE_S,
        "rows": [r for folder in args.probes for r in rows(load(folder))]
        + [r for folder in args.updates for r in rows(load(folder, "updates"), "updates")],
    }
    md, js = write_outputs(args.out, "segment_design", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.segment_design")
