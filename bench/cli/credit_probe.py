"""``creditbench credit-probe SPEC``: credit measured per update on a sweep's pairs (bench.paired): each
credit method against its twin (and placebo) from checkpoints of reference trajectories added in rounds
until each comparison is decided, one update per arm on exactly the same batch, scored on the exact
objective J. Writes results/probes/<sweep>/: updates.json (every record), report.json and report.md
(bench.report.per_update), per_update.png. Interrupted, it resumes when run again with the same arguments:
each finished reference trajectory is kept in <folder>/partial/ (bench.paired.journal) until updates.json is
written."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

from bench.run.args import ArgumentParser

USAGE = "credit-probe SPEC.yaml [--batches N --first N --cap N --until resolved --lrs A,B --jobs N --dry_run]"
HELP = "credit per update: each credit method vs its twin on the same batch, scored on J"


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parser() -> ArgumentParser:
    from bench.paired.plan import ProbeOptions

    d = ProbeOptions()
    ap = ArgumentParser(
        prog="creditbench credit-probe",
        description="Paired updates: each credit method vs its twin from the same weights, optimizer state "
        "and rollout batch, scored on the exact objective J (tasks with one reference completion).",
    )
    ap.add_argument("spec", help="sweep YAML whose labels and credit controls are probed (results/sweeps/)")
    ap.add_argument("--batches", type=int, default=d.batches, help=f"batches per checkpoint (default {d.batches})")
    ap.add_argument("--blame_batches", type=int, default=d.blame_batches, help="batches with blame alignment")
    ap.add_argument("--phases", type=_floats, default=d.phases, help="checkpoints as fractions of the budget "
                    "(default 0,0.5,1)")  # fmt: skip
    ap.add_argument("--reference_seeds", type=_ints, default=d.reference_seeds,
                    help="reference trajectories' seeds, in the order the rounds add them (default 0..11)")  # fmt: skip
    ap.add_argument("--first", type=int, default=d.first, help=f"trajectories in the first round (default {d.first})")
    ap.add_argument("--step", type=int, default=d.step, help=f"trajectories added per round (default {d.step})")
    ap.add_argument("--cap", type=int, default=d.cap, help=f"trajectories per pair at most (default {d.cap})")
    ap.add_argument("--until", default=d.until, help="a pair's rounds stop once every comparison is decided "
                    "(default), or decided or resolved (its interval within the credit table's target)")  # fmt: skip
    ap.add_argument("--spending", default=d.spending, help=f"alpha spending over the rounds (default {d.spending})")
    ap.add_argument("--alpha", type=float, default=d.alpha, help=f"family-wise error rate (default {d.alpha:g})")
    ap.add_argument("--margin", type=float, default=d.margin,
                    help=f"equivalence margin, a fraction of the control's gain (default {d.margin:g})")  # fmt: skip
    ap.add_argument("--reference", default=d.reference, help="control (each pair's twin) or a label of the sweep")
    ap.add_argument("--lrs", type=_floats, default=d.lrs, help="common learning rates (default 1e-4,2e-4)")
    ap.add_argument("--trajectory_lr", type=float, default=None,
                    help="the reference trajectories' rate (default: each label's own)")  # fmt: skip
    ap.add_argument("--placebo", action="store_true", help="also each method against its placebo")
    ap.add_argument("--oracle", action="store_true", help="also each twin's oracle (the ceiling)")
    ap.add_argument("--oracle_rollouts", type=int, default=d.oracle_rollouts,
                    help=f"K continuations per state of the oracle's values (default {d.oracle_rollouts})")  # fmt: skip
    ap.add_argument("--oracle_batches", type=int, default=None,
                    help="oracle arms and credit quality on the first this many batches (default all)")  # fmt: skip
    ap.add_argument("--segment_steps", type=int, default=0, help="K > 0: paired segments of K updates")
    ap.add_argument("--segment_batches", type=int, default=0, help="segments per checkpoint")
    ap.add_argument("--eval_problems", type=int, default=None, help="problems J is scored on (default: the sweep's)")
    ap.add_argument("--model", default=None, help="a model in place of the sweep's (its tuned rates then do not apply)")
    ap.add_argument("--seed", type=int, default=d.seed, help="the probe's seed (its batches)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--results_dir", default="results", help="where results/<sweep>/tuning.json is read")
    ap.add_argument("--out", default=None, help="output folder (default <results_dir>/probes/<sweep>)")
    ap.add_argument("--dry_run", action="store_true", help="print the plan and its cost, run nothing")
    ap.add_argument("--report", action="store_true", help="only redo the report from the folder's updates.json")
    return ap


def _spec_design(spec: str) -> dict:
    """The spec's ``credit_probe`` options, each checked to be one of the probe's."""
    from bench.errors import CreditBenchError
    from bench.paired.plan import ProbeOptions
    from bench.sweep.spec import read_spec

    design = read_spec(spec).credit_probe
    valid = [f.name for f in dataclasses.fields(ProbeOptions)]
    unknown = sorted(set(design) - set(valid))
    if unknown:
        raise CreditBenchError(
            f"sweep spec {spec}: credit_probe has no option {unknown[0]!r}; valid: {', '.join(valid)}"
        )
    return {k: tuple(v) if isinstance(v, list) else v for k, v in design.items()}


def planned(argv: list[str]):
    """The arguments and the probe's plan (bench.paired.plan): the spec's credit_probe design, a flag given
    here winning."""
    from bench.errors import CreditBenchError
    from bench.options import build_config
    from bench.paired.plan import ProbeOptions, probe_plan

    a = parser().parse_args(argv)
    if a.jobs < 1:
        raise CreditBenchError(f"--jobs must be >= 1, got {a.jobs}")
    fields = [f.name for f in dataclasses.fields(ProbeOptions)]
    given = {k for k in fields if any(t == f"--{k}" or t.startswith(f"--{k}=") for t in argv)}
    design = _spec_design(a.spec)  # the spec's credit_probe section; a flag given here wins
    values = {k: getattr(a, k) if k in given or k not in design else design[k] for k in fields}
    return a, probe_plan(a.spec, build_config(ProbeOptions, values, "credit-probe"), a.results_dir)


def main(argv: list[str]) -> int:
    from bench.errors import CreditBenchError
    from bench.paired.journal import FOLDER
    from bench.paired.probe import cost, journaled, run_probe, write
    from bench.report import per_update, per_update_files
    from bench.sweep.sweep import probe_dir, report_path

    a, plan = planned(argv)
    options = plan.options
    out = Path(a.out) if a.out else probe_dir(a.results_dir, plan.sweep)
    if a.report:
        if not (out / "updates.json").is_file():
            raise CreditBenchError(f"{out / 'updates.json'} not found: run the probe first (without --report)")
        probe = json.loads((out / "updates.json").read_text())
    else:
        kept = journaled(plan, out / FOLDER)
        c = cost(plan, kept)
        minutes = lambda k: f"about {c[k] / 60 / a.jobs:.1f} min on {a.jobs} core(s)" if c[k] else "pace unknown"  # noqa: E731
        print(
            f"credit probe of {plan.sweep}: {len(plan.pairs)} pair{'s' * (len(plan.pairs) != 1)}, first round "
            f"{c['trajectory_step']} reference RL steps, {c['update']} paired updates, {c['segment_update']} "
            f"segment updates: {minutes('core_s')}; at the cap ({options.cap} trajectories per pair) "
            f"{c['cap_update']} paired updates: {minutes('cap_core_s')}"
        )
        for note in plan.notes:
            print(f"note: {note}")
        if kept:
            print(f"resuming: {kept} reference trajectories kept by an interrupted run ({out / FOLDER}), the cost "
                  "above is what is left")  # fmt: skip
        if a.dry_run:
            return 0
        probe = run_probe(plan, a.jobs, rounds=per_update.needs, journal=out / FOLDER)
        write(probe, out)
        shutil.rmtree(out / FOLDER, ignore_errors=True)  # written whole: the journal is done
    sweep_report = report_path(a.results_dir, plan.sweep)
    rep = per_update.report(probe, json.loads(sweep_report.read_text()) if sweep_report.is_file() else None)
    per_update_files.write(rep, out)
    sys.stdout.write(per_update_files.markdown(rep))
    return 0
