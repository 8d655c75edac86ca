"""``creditbench sweep SPEC``: validate a sweep spec, list or plan its runs (``--dry_run``), or run it (its
tuning sweep first where it has one) on this machine's workers or a Ray cluster (``--ray``), then print
its report. The running itself is :func:`bench.sweep.launch.run_sweep`."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from bench.config import default_uri
from bench.run.args import ArgumentParser

USAGE = "sweep SPEC.yaml [--jobs N] [--ray [ADDR]] [--dry_run]"
HELP = "run a sweep spec: methods x models x seeds, then the report"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _fail(msg: str) -> int:
    print(f"creditbench: error: {msg}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    """Check the spec; then its dry run (:func:`_dry_run`), or its runs and its report."""
    from bench.report.files import markdown, write_report
    from bench.sweep.sweep import inert_lines, load_spec

    a = _parser().parse_args(argv)
    if a.jobs is not None and a.jobs < 1:
        return _fail(f"--jobs must be >= 1, got {a.jobs}")
    sweep = load_spec(a.spec, a.results_dir)
    for line in inert_lines(sweep):
        print(line, file=sys.stderr)
    if a.dry_run:
        _dry_run(sweep, a)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)  # `kill`, scancel: stopped as Ctrl-C stops it, and resumable
    sweep, report = _run(sweep, a)
    if a.credit_probe:
        _probe(a, dry_run=False)
        report = write_report(sweep, a.results_dir)  # with its "Credit per update" section
    print(markdown(report))
    print(f"\nwritten: {Path(a.results_dir) / sweep.name}/ (report.json, summary.md, summary.csv, *.png)")
    return 0


def _parser() -> ArgumentParser:
    ap = ArgumentParser(
        prog="creditbench sweep",
        description="Run a sweep spec: every method x model x seed as its own MLflow run under one parent "
        "run, in --jobs worker processes that import everything once; then the report.",
    )
    ap.add_argument("spec", help="sweep YAML (see results/sweeps/)")
    ap.add_argument(
        "--jobs", type=int, default=None, help="runs at a time (default 1; with --ray, as many as the cluster holds)"
    )
    ap.add_argument("--results_dir", default="results", help="the sweep's folder goes under it (default results)")
    ap.add_argument(
        "--uri",
        default=default_uri(),
        help="MLflow tracking store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)",
    )
    ap.add_argument(
        "--dry_run",
        action="store_true",
        help="validate the spec (every check a run makes of its configuration) and list its runs; start nothing",
    )
    ap.add_argument(
        "--plan",
        action="store_true",
        help="with --dry_run: also check what this machine must provide (vLLM where a run names it, the "
        "tracking store, the data files; a note for what would stop a run here), build each run short of "
        "its weights (the model on the meta device, LoRA, strategy) and estimate its memory",
    )
    ap.add_argument("--gpu_gb", type=float, default=80.0, help="GPU memory vLLM's share is taken of, for --plan")
    ap.add_argument(
        "--isolate",
        action="store_true",
        help="each run in a process of its own (default: --jobs worker processes that import everything once)",
    )
    ap.add_argument(
        "--ray",
        nargs="?",
        const=os.environ.get("RAY_ADDRESS") or "local",
        default=os.environ.get("RAY_ADDRESS"),
        metavar="ADDRESS",
        help="run on a Ray cluster: its head's host:port (default: $RAY_ADDRESS; set, it implies --ray), or "
        "'local' to start one on this machine (bench.sweep.ray_engine; docs/cluster.md)",
    )
    ap.add_argument(
        "--credit_probe",
        action="store_true",
        help="then measure credit per update on the sweep's pairs (creditbench credit-probe with its defaults) "
        "and add it to the report",
    )
    return ap


def _dry_run(sweep, a) -> None:
    """``--dry_run``: the spec checked as a run checks its configuration (and, with ``--plan``, this
    machine), its runs listed (with their memory plans), the design and the cost; nothing started."""
    from bench.report.design import cost_line, design_lines, sequential_lines
    from bench.sweep import tuning
    from bench.sweep.sweep import load_spec

    _preflight(sweep, a.uri, here=a.plan)  # before the run list: a refused spec prints one line only
    plans: dict[str, str] = {}
    for r in sweep.runs:
        print(f"{r.key}  ({r.cfg.method.name}, {r.cfg.model.name}, seed {r.cfg.seed})")
        if a.plan:
            from bench.run.plan import memory_plan

            line = plans.get(f"{r.label}/{r.cfg.model.name}") or memory_plan(r.cfg, a.gpu_gb).line()
            plans[f"{r.label}/{r.cfg.model.name}"] = line  # seeds differ in nothing the plan sees
            print(f"    {line}")
    print(f"{len(sweep.runs)} runs; budget {sweep.budget}; baseline {sweep.baseline}")
    print("\n".join(design_lines(sweep, a.results_dir, a.jobs or 1)))
    if sweep.spec.sequential is not None:
        print("\n".join(sequential_lines(sweep, a.results_dir, a.jobs or 1)))
    if sweep.spec.tune is not None:
        tuned = load_spec(a.spec, a.results_dir, tuning=True)
        done = "done: results/{0}/tuning.json" if tuning.read(a.results_dir, sweep.name) else "first: {1} runs"
        print(f"tuning ({done.format(sweep.name, len(tuned.runs))}): {cost_line(tuned, a.results_dir, a.jobs or 1)}")
    if a.credit_probe:
        _probe(a, dry_run=True)


def _run(sweep, a) -> tuple:
    """Its tuning sweep first where it has one and has not run, then the sweep (in rounds where it is
    sequential); the sweep of the runs it ran (at the tuned points; a sequential one's rounds) and its report."""
    from bench.report.files import write_report
    from bench.sweep import tuning
    from bench.sweep.launch import run_sweep
    from bench.sweep.sweep import load_spec

    def run(s):
        return run_sweep(s, write_report, a.jobs, a.results_dir, a.uri, isolate=a.isolate, ray=a.ray)

    if sweep.spec.tune is not None and tuning.read(a.results_dir, sweep.name) is None:
        tuned = load_spec(a.spec, a.results_dir, tuning=True)
        run(tuned)
        tuning.write(sweep.spec, tuned, a.results_dir)
        sweep = load_spec(a.spec, a.results_dir)  # its runs at the chosen points
    return rounds(sweep, run) if sweep.spec.sequential is not None else (sweep, run(sweep))


def rounds(sweep, run, log=print) -> tuple:
    """A sequential sweep (``sequential`` in its spec): every label's first seeds, then, round by round,
    the next look's seeds for the labels of the credit comparisons still undecided, until none is
    (bench.report.sequential). ``run(subset)`` runs a sweep of some of the runs and returns its report;
    a round's finished runs are skipped, so the same call resumes where the data say. Returns the sweep
    of the runs the rounds ran and its report."""
    import dataclasses

    from bench.report.sequential import NextRound

    seq = sweep.spec.sequential
    order = sorted(set(sweep.spec.seeds))
    needs = dict.fromkeys(sweep.labels, seq.first)
    for round_ in range(1, len(order) + 1):
        subset = dataclasses.replace(sweep, runs=[r for r in sweep.runs if r.cfg.seed in order[: needs[r.label]]])
        report = run(subset)
        next_round = NextRound.of(report)
        more = {lab: n for lab, n in next_round.needs.items() if n > needs.get(lab, 0)}
        undecided = next_round.open
        if not more:
            log(f"sequential sweep {sweep.name}: every credit comparison decided or at the cap after round {round_}")
            return subset, report
        needs.update(more)
        log(
            f"sequential sweep {sweep.name}: round {round_} left {len(undecided)} comparison(s) undecided; round "
            f"{round_ + 1} runs {', '.join(f'{lab} to {n} seeds' for lab, n in more.items())}"
        )
    return subset, report


def _probe(a, dry_run: bool) -> None:
    """``creditbench credit-probe`` on the sweep's spec, its defaults, the sweep's workers."""
    from bench.cli.credit_probe import main as credit_probe

    argv = [a.spec, "--jobs", str(a.jobs or 1), "--results_dir", a.results_dir] + (["--dry_run"] if dry_run else [])
    credit_probe(argv)


def _preflight(sweep, uri: str, here: bool) -> None:
    """The checks ``creditbench train`` makes before any work (bench.run.resolve.preflight) for every
    run of the sweep: what a run refuses in its configuration, the dry run refuses. With ``here``
    (``--plan``) also this machine's (vLLM where a run names it, the tracking store, the data files):
    what would stop a run here is printed as a note, not refused, as a plan is often made on another
    machine than the one the runs will use."""
    import dataclasses

    from bench.errors import CreditBenchError
    from bench.run.resolve import preflight

    seen, notes = set(), {}
    for r in sweep.runs:
        what = repr((r.cfg.method, r.cfg.model, r.cfg.task, r.cfg.eval.tasks, r.cfg.rollout, r.cfg.trainer))
        if what in seen:  # seeds differ in nothing the checks see
            continue
        seen.add(what)
        cfg = dataclasses.replace(r.cfg, tracking=dataclasses.replace(r.cfg.tracking, uri=uri))
        try:
            preflight(cfg, here=False)
        except CreditBenchError as e:
            raise CreditBenchError(f"sweep spec {sweep.path}: run {r.key}: {e}") from None
        if here:
            try:
                preflight(cfg)
            except CreditBenchError as e:
                notes.setdefault(str(e), r.key)
    for note, key in notes.items():
        print(f"note: on this machine, run {key} (and any like it) would stop before it starts: {note}")
