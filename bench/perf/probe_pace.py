"""Benchmark: what the credit probe's dry run charges against what the committed probes spent.

    python -m bench.perf.probe_pace [--probes 'results/probes/*/updates.json'] [--out results/benchmarks]

Each committed probe records its work (its reference trajectories, every paired update and segment, the
oracle's batches) and its wall time on ``jobs`` processes (results/probes/<name>/updates.json). Its plan is
rebuilt from the sweep spec it names (results/sweeps/<sweep>.yaml) and the options it recorded, and the work
it recorded is charged as the dry run charges a plan (bench.paired.probe.charge): once with each update and
RL step at its label's pace (the method's measured update cost, under LoRA the adapter's:
bench.paired.probe.label_pace), and once at the plain pace (every update a GRPO update on the full model),
what the dry run charged before label paces. The ratio of recorded core-minutes (wall time x jobs) to the
charge says how far the dry run's minutes are from a probe's, by model size and with or without LoRA.

The recorded wall times were not measured for this: they come from the machines, code versions and loads
each probe ran on (some beside other work), so a single ratio is noisy; the medians by size and the
LoRA rows beside the others at the same size are what this reads. Writes ``<out>/probe_pace.{md,json}``.
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.script import machine, md_table, run_script, script_parser, write_outputs


def work(plan, records: dict[str, Any], paced: bool) -> dict[str, float]:
    """The work a probe of ``plan`` recorded in ``records`` (its updates.json), in units of each pace
    constant; each update, segment update and RL step at its label's pace where ``paced``."""
    from bench.paired.probe import _augment_rollouts, label_pace

    pace = {label: (label_pace(plan, label) if paced else 1.0) for label in plan.labels}
    cfg = next(iter(plan.labels.values()))
    steps = -(-plan.budget // (cfg.rl.prompts_per_step * cfg.rl.group_size))
    trajectories = {(c["reference"], c["seed"]) for c in records["checkpoints"]}
    oracles = {label for label, c in plan.labels.items() if c.method.oracle}
    batch = lambda u: (u["reference"], u["seed"], u["phase"], u["batch"])  # noqa: E731
    truths = {batch(u) for u in records["updates"] if u["label"] in oracles}
    augments = sum(
        _augment_rollouts(plan, labels) * len({batch(u) for u in records["updates"] if u["reference"] == reference})
        for reference, labels in plan.groups()
    )
    return {
        "trajectory_step": sum(pace[reference] for reference, _ in trajectories) * steps,
        "update": sum(pace[u["label"]] for u in records["updates"]),
        "oracle_rollout": len(truths) * plan.options.oracle_rollouts + augments,
        "segment_update": sum(pace[s["label"]] for s in records["segments"]),
    }


def measure(path: Path) -> dict[str, Any] | None:
    """One committed probe's recorded work, its charge both ways and its recorded core seconds (None where
    its sweep spec is not committed)."""
    from bench.paired.plan import ProbeOptions, probe_plan
    from bench.paired.probe import charge

    records = json.loads(path.read_text())
    described = records["plan"]
    spec = Path("results/sweeps") / f"{described['sweep']}.yaml"
    if not spec.is_file() or "wall_s" not in records:
        return None
    plan = probe_plan(spec, ProbeOptions(**described["options"]))
    model = next(iter(plan.labels.values())).model.name
    paced, plain = work(plan, records, True), work(plan, records, False)
    return {
        "probe": path.parent.name,
        "model": model,
        "lora": any(c.model.lora.rank for c in plan.labels.values()),
        "trajectories": len({(c["reference"], c["seed"]) for c in records["checkpoints"]}),
        "updates": len(records["updates"]),
        "segments": len(records["segments"]),
        "charged_s": charge(paced, model),
        "plain_s": charge(plain, model),
        "recorded_s": records["wall_s"] * records["jobs"],
        "jobs": records["jobs"],
    }


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median recorded / charged by model size and adapter, both ways."""
    from bench.models.policy import tiny_matrix_params

    out = []
    for key in sorted({(r["model"], r["lora"]) for r in rows}, key=lambda k: (tiny_matrix_params(k[0]), k[1])):
        group = [r for r in rows if (r["model"], r["lora"]) == key]
        out.append(
            {
                "model": key[0],
                "lora": key[1],
                "probes": len(group),
                "paced": statistics.median(r["recorded_s"] / r["charged_s"] for r in group),
                "plain": statistics.median(r["recorded_s"] / r["plain_s"] for r in group),
            }
        )
    return out


def markdown(data: dict[str, Any]) -> str:
    rows = [
        [
            f"`{r['probe']}`",
            r["model"],
            "yes" if r["lora"] else "no",
            r["trajectories"],
            r["updates"] + r["segments"],
            f"{r['plain_s'] / 60:.1f}",
            f"{r['charged_s'] / 60:.1f}",
            f"{r['recorded_s'] / 60:.1f}",
            f"{r['recorded_s'] / r['plain_s']:.2f}",
            f"{r['recorded_s'] / r['charged_s']:.2f}",
        ]
        for r in data["rows"]
    ]
    head = ["probe", "model", "LoRA", "trajectories", "updates", "charged, plain (core-min)"]
    head += ["charged, paced (core-min)", "recorded (core-min)", "recorded / plain", "recorded / paced"]
    medians = [
        [s["model"], "yes" if s["lora"] else "no", s["probes"], f"{s['plain']:.2f}", f"{s['paced']:.2f}"]
        for s in data["summary"]
    ]
    return "\n".join(
        [
            "# The credit probe's dry run against the committed probes",
            "",
            f"`{data['command']}`, read on {data['machine']['cpu']}: no probe is run. Each committed probe's "
            "recorded work charged as the dry run charges a plan (bench.paired.probe.charge), at each label's pace "
            "(paced: the method's measured update cost and LoRA's, bench.paired.probe.label_pace) and at the plain "
            "pace (every update a full-model GRPO update), against its recorded wall time x jobs. The wall times "
            "come from the machines, code versions and loads each probe ran on (some beside other work): "
            "read the medians, not one row.",
            "",
            *md_table("model | LoRA | probes | median recorded / plain | median recorded / paced", medians, "lllrr"),
            "",
            *md_table(head, rows, "lllrrrrrrr"),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.probe_pace")
    ap.add_argument("--probes", default="results/probes/*/updates.json", help="the probes' records (a glob)")
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    rows = [r for f in sorted(glob.glob(args.probes)) if (r := measure(Path(f))) is not None]
    data = {
        "machine": machine(),
        "command": "python -m bench.perf.probe_pace " + " ".join(argv if argv is not None else sys.argv[1:]),
        "rows": rows,
        "summary": summary(rows),
    }
    md, js = write_outputs(args.out, "probe_pace", markdown(data), data)
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.probe_pace")
