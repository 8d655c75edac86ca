"""Benchmark: the group-sequential design (bench.report.sequential) simulated with the measured noise.

    python -m bench.studies.sequential_design [--sweep embedded] [--first F] [--step S] [--cap C]
                                           [--sims 2000] [--effect 0.03] [--out results/benchmarks]

The primary family of a finished sweep (each credit method against each of its credit controls) gives
the per-pair SD of the paired differences across training seeds (results/<sweep>/runs). Each
simulated sweep draws every comparison's per-seed differences from a normal distribution with its own
SD and a true difference, and runs the sequential analysis the sweep runs
(``bench.report.sequential.analyse``, by default on the sweep's own schedule) look by look, each
comparison getting seeds only while it is open. Scenarios:

- **null**: every true difference 0. The family-wise error is the share of simulated sweeps in which
  any comparison was called better or worse; it must stay at or below alpha. Also: how often each is
  shown equivalent within the margin, and its expected seeds.
- **effect**: every true difference +``--effect`` (3 points). Power (called better), how often a
  comparison is wrongly called equivalent (the effect sits on the margin, so this is the equivalence
  test's error, which must stay at or below alpha), expected seeds.
- **one effect**: the first comparison at +effect, the others 0: the family-wise error over the
  true nulls with one real effect in the family (Holm's recycling at work), and its power.

Both spending functions are simulated, and the fixed design at the cap (every comparison at ``cap``
seeds, one look, Holm) for reference. The expected runs count every label of the family at the seeds
its comparisons needed (a label shared by two comparisons runs the larger), and the expected minutes
use the sweep's measured run time on 2 workers. Writes ``<out>/sequential_design.{md,json}``.
"""

from __future__ import annotations

import math
import statistics
import sys
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.report import sizing
from bench.script import md_table, run_script, script_parser, write_outputs
from bench.stats.paired import MIN_SEEDS
from bench.stats.spending import SPENDING
from bench.sweep.schedule import SequentialSpec


def measured_pairs(results_dir: str, sweep: str) -> dict[str, dict[str, Any]]:
    """The sweep's primary comparisons with the SD of their paired differences, and its mean run time."""
    from bench.report.comparisons import credit_pairs
    from bench.run.result import load_runs
    from bench.sweep.sweep import load_spec

    spec_path = f"{results_dir}/{sweep}/sweep.yaml"
    try:
        spec = load_spec(spec_path, results_dir).spec
    except (FileNotFoundError, CreditBenchError) as e:
        raise CreditBenchError(f"no finished sweep {sweep!r} under {results_dir} to measure ({e})") from None
    runs = load_runs(results_dir, sweep)
    pairs = credit_pairs(runs, spec.analysis)
    if not pairs:
        raise CreditBenchError(f"sweep {sweep!r} has no credit comparisons (analysis.credit_controls) with runs")
    out = {}
    for name, p in pairs.items():
        d = np.array(list(p["diffs"].values()))
        if len(d) < MIN_SEEDS:
            continue
        out[name] = {"method": p["method"], "control": p["control"], "sd": float(d.std(ddof=1)), "seeds": len(d),
                     "mean": float(d.mean())}  # fmt: skip
    walls = [r.wall_s for r in runs if getattr(r, "wall_s", None)]
    in_family = {v for p in out.values() for v in (p["method"], p["control"])}
    return {
        "pairs": out,
        "run_s": statistics.mean(walls) if walls else None,
        "margin": spec.analysis.margin,
        "alpha": spec.analysis.alpha,
        "labels_other": sorted({r.label for r in runs} - in_family),
        "sequential": vars(spec.sequential) if spec.sequential else None,
    }


def fixed(sds: list[float], truth: list[float], n: int, alpha: float, sims: int, seed: int) -> dict[str, Any]:
    """The fixed design for reference: every comparison at ``n`` seeds, one paired t-test each, Holm."""
    from scipy import stats

    from bench.stats.family import holm

    rng = np.random.default_rng(seed)
    m = len(sds)
    better, error = np.zeros(m), 0
    for _ in range(sims):
        d = np.stack([rng.normal(truth[i], sds[i], n) for i in range(m)])
        t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
        p = holm((2 * stats.t.sf(np.abs(t), n - 1)).tolist())
        sig = np.array(p) < alpha
        better += sig & (t > 0)
        error += bool(np.any(sig & (np.array(truth) == 0)))
    return {"better": (better / sims).tolist(), "family_error": error / sims}


def markdown(data: dict[str, Any]) -> str:
    sch, pairs = data["schedule"], data["pairs"]
    names = list(pairs)
    sds = ", ".join(f"{n}: {p['sd'] * 100:.1f} points over {p['seeds']} seeds" for n, p in pairs.items())
    lines = [
        "# The group-sequential design, simulated with the measured noise",
        "",
        f"`{data['command']}`. Per-pair SDs of the paired differences from results/{data['sweep']}/runs "
        f"({sds}). "
        f"Seeds: {sch['first']} first, {sch['step']} more per round, at most {sch['cap']} (looks at "
        f"{', '.join(map(str, sch['looks']))}); alpha {data['alpha']} (Holm across the {len(names)} comparisons), "
        f"equivalence margin ±{data['margin'] * 100:g} points; {data['sims']} simulated sweeps per row.",
        "",
    ]
    short = [f"{p['method']} vs {p['control']}" for p in pairs.values()]
    header = ["spending", "scenario", "family-wise error", *[f"{n}: better / equiv. / seeds" for n in short],
              "expected runs", "expected minutes (2 workers)"]  # fmt: skip
    rows = []
    for kind, scen in data["results"].items():
        for label, r in scen.items():
            cells = [
                f"{r['p']['better'][i]:.2f} / {r['p']['equivalent'][i]:.2f} / {r['seeds'][i]:.1f}"
                for i in range(len(names))
            ]
            minutes = "–" if r.get("minutes") is None else f"{r['minutes']:.0f}"
            rows.append([kind, label, f"{r['family_error']:.3f}", *cells, f"{r['runs']:.0f}", minutes])
    lines += md_table(header, rows, "ll" + "r" * (len(header) - 2))
    lines += ["", "Fixed design at the cap (every comparison at the cap's seeds, one look, Holm), for reference:", ""]
    frows = [
        [label, f"{r['family_error']:.3f}", *[f"{b:.2f}" for b in r["better"]], f"{r['runs']:.0f}"]
        for label, r in data["fixed"].items()
    ]
    lines += md_table(["scenario", "family-wise error", *[f"{n}: better" for n in short], "runs"], frows,
                      "l" + "r" * (len(names) + 2))  # fmt: skip
    lines += ["", *data["notes"]]
    return "\n".join(lines) + "\n"


def notes(data: dict[str, Any]) -> list[str]:
    alpha, sims = data["alpha"], data["sims"]
    worst = max(r["family_error"] for scen in data["results"].values() for r in scen.values())
    eq_err = max(max(s["effect"]["p"]["equivalent"]) for s in data["results"].values())
    se = math.sqrt(alpha * (1 - alpha) / sims)
    held = "stays at or below" if worst <= alpha else ("is within two simulation SEs of" if worst <= alpha + 2 * se
                                                        else "EXCEEDS")  # fmt: skip
    return [
        f"The family-wise error {held} alpha = {alpha} in every simulated scenario (at most {worst:.3f}; the "
        f"simulation's own SE at {sims} sweeps is about {se:.3f}). With the true difference on the margin, a "
        f"comparison is called equivalent at most {eq_err:.3f} of the time: the equivalence test's error, "
        f"which must also stay at or below alpha.",
        "",
        "Scenarios: null (every true difference 0), effect (every one +"
        f"{data['effect'] * 100:g} points), one effect (the first +{data['effect'] * 100:g}, the rest 0). "
        "Expected minutes: the expected runs at the sweep's mean run time on 2 workers.",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.studies.sequential_design")
    ap.add_argument("--sweep", default="embedded", help="a finished sweep under --results whose per-pair SDs to use")
    ap.add_argument("--results", default="results")
    ap.add_argument("--first", type=int, default=None, help="default: the sweep spec's sequential.first, else 6")
    ap.add_argument("--step", type=int, default=None, help="default: the spec's sequential.step, else 6")
    ap.add_argument("--cap", type=int, default=None, help="default: the spec's sequential.cap, else 60")
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--effect", type=float, default=0.03, help="the true difference of the effect scenarios")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    if args.sims < 100:
        raise CreditBenchError(f"--sims must be >= 100 for an error rate worth stating, got {args.sims}")
    measured = measured_pairs(args.results, args.sweep)
    planned = measured["sequential"] or {"first": 6, "step": 6, "cap": 60}
    args.first = args.first if args.first is not None else planned["first"]
    args.step = args.step if args.step is not None else planned["step"]
    args.cap = args.cap if args.cap is not None else planned["cap"]
    pairs = measured["pairs"]
    sds = [p["sd"] for p in pairs.values()]
    m = len(sds)
    scenarios = {"null": [0.0] * m, "effect": [args.effect] * m, "one effect": [args.effect] + [0.0] * (m - 1)}
    alpha, margin = measured["alpha"], measured["margin"]
    others = len(measured["labels_other"])
    results: dict[str, dict[str, Any]] = {}
    for kind in SPENDING:
        schedule = SequentialSpec(args.first, args.step, args.cap, kind)
        results[kind] = {}
        for label, truth in scenarios.items():
            r = sizing.simulate(sds, truth, schedule, alpha, margin, args.sims, args.seed)
            r["runs"] = sizing.runs_needed(pairs, r.pop("seeds_all"), args.first, others)
            r["minutes"] = None if measured["run_s"] is None else r["runs"] * measured["run_s"] / 2 / 60
            results[kind][label] = r
    all_labels = {v for p in pairs.values() for v in (p["method"], p["control"])}
    fixed_runs = (len(all_labels) + others) * args.cap
    fixed_res = {}
    for label, truth in scenarios.items():
        fixed_res[label] = {**fixed(sds, truth, args.cap, alpha, args.sims, args.seed), "runs": fixed_runs}
    schedule = SequentialSpec(args.first, args.step, args.cap)
    data = {
        "command": "python -m bench.studies.sequential_design " + " ".join(argv if argv is not None else sys.argv[1:]),
        "sweep": args.sweep,
        "schedule": {"first": args.first, "step": args.step, "cap": args.cap, "looks": list(schedule.looks)},
        "alpha": alpha,
        "margin": margin,
        "effect": args.effect,
        "sims": args.sims,
        "pairs": pairs,
        "run_s": measured["run_s"],
        "results": results,
        "fixed": fixed_res,
    }
    data["notes"] = notes(data)
    md, js = write_outputs(args.out, "sequential_design", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.studies.sequential_design")
