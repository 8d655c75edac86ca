"""``creditbench judge METHOD``: a registered credit method to its verdicts in one command. It writes the
sweep spec that sets the method against its credit-off twin (and placebo) with the flagship's design
(bench.sweep.judge: results/sweeps/judge-<label>.yaml, reproducible and editable), prints the cost first,
runs the sweep (tuning on seeds the verdict never sees, then seeds in rounds until each comparison is
decided) and the credit probe at every size (per update, trajectories in rounds), and writes the report
card (bench.report.card: results/judge-<label>/card.md and card.json, also on the sweep's MLflow parent
run). Started again, it resumes: the sweep skips its finished runs and a probe with its records only
redoes its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.run.args import ArgumentParser

USAGE = (
    "judge METHOD [--options YAML] [--label L] [--task T] [--sizes A,B] [--rates YAML] [--per_update_only] "
    "[--jobs N] [--dry_run]"
)
HELP = "a credit method against its twin (and placebo), per update and in rounds: its report card"


def parser() -> ArgumentParser:
    ap = ArgumentParser(
        prog="creditbench judge",
        description="A registered credit method against its credit-off twin (and its placebo where its credit "
        "selects or weights tokens): the credit probe per update at every size, the sweep in rounds at the "
        "first, and the report card.",
    )
    ap.add_argument("method", help="a registered method with a credit-off twin (creditbench methods)")
    ap.add_argument("--options", default=None, help="the method's options, a YAML mapping (e.g. '{slope: 0.5}')")
    ap.add_argument("--label", default=None, help="what to call it (default: the method's name); names the files")
    ap.add_argument("--task", default="chain", help="a task with reference completions (default chain)")
    ap.add_argument("--sizes", default="tiny-500k", help="model sizes, the first also end to end (default tiny-500k)")
    ap.add_argument("--rates", default=None, help="a size's own rates, a YAML mapping size -> {lr: R, lrs: [A, B]}: "
                    "its reference trajectories at R, its arms at A, B (default: the template's)")  # fmt: skip
    ap.add_argument("--controls", default=None, help="twin or twin,placebo (default: the method's controls)")
    ap.add_argument("--template", default="results/sweeps/embedded.yaml", help="the spec whose design is used")
    ap.add_argument("--per_update_only", action="store_true", help="only the credit probe, no sweep")
    ap.add_argument("--oracle", action="store_true", help="also the twin's oracle per update: the method's share of it")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--results_dir", default="results")
    ap.add_argument("--dry_run", action="store_true", help="write the spec, print the cost, run nothing")
    return ap


def main(argv: list[str]) -> int:
    from bench.cli import credit_probe, sweep
    from bench.errors import CreditBenchError
    from bench.sweep.judge import write_spec

    a = parser().parse_args(argv)
    if a.jobs < 1:
        raise CreditBenchError(f"--jobs must be >= 1, got {a.jobs}")
    j = _judged(a)
    rates = _rates(a, j)
    path, written = write_spec(j, Path(a.template))
    print(f"creditbench judge {j.label}: {', '.join(f'{m} vs {c}' for m, c in j.pairs())} on {j.task}; spec {path}")
    common = ["--jobs", str(a.jobs), "--results_dir", a.results_dir]
    probes = {size: _probe_args(str(path), j, size, a.results_dir, common, a.oracle, rates) for size in j.sizes}
    try:  # the cost first; what a probe or the sweep refuses (a task without references) stops here
        done = {size: _resumed(_probe_out(j, size, a.results_dir), rates.get(size)) for size in j.sizes}
        for size, args in probes.items():
            if done[size]:  # its plan still checked
                credit_probe.planned(args)
                print(f"credit probe at {size}: done ({_probe_out(j, size, a.results_dir)}), its report only")
            else:
                credit_probe.main([*args, "--dry_run"])
        if not a.per_update_only:
            sweep.main([str(path), *common, "--dry_run"])
    except (CreditBenchError, SystemExit):
        if written:  # nothing of this judge is left behind
            path.unlink()
        raise
    if a.dry_run:
        return 0
    if not a.per_update_only:
        sweep.main([str(path), *common])
    for size, args in probes.items():
        credit_probe.main([*args, "--report"] if done[size] else args)  # with its records: only its report again
    _card(j, path, a.results_dir, probes)
    return 0


def probe_costs(argv: list[str]) -> dict[str, tuple[float, float]]:
    """Size -> the core seconds of the judge's probe there (its first round, every pair at the cap; 0 for a
    probe already done), for the judge ``argv`` asks for, once its spec is written (after a dry run)."""
    from bench.paired.journal import FOLDER
    from bench.paired.probe import cost, journaled

    out = {}
    for size, (plan, folder) in probe_plans(argv).items():
        c = cost(plan, journaled(plan, folder / FOLDER)) if plan is not None else {"core_s": 0.0, "cap_core_s": 0.0}
        out[size] = (c["core_s"], c["cap_core_s"])
    return out


def probe_plans(argv: list[str]) -> dict[str, tuple[Any, Path]]:
    """Size -> the plan of the judge's probe there (``None`` for a probe already done) and its folder, for the
    judge ``argv`` asks for, once its spec is written (after a dry run)."""
    from bench.cli import credit_probe
    from bench.sweep.judge import write_spec

    a = parser().parse_args(argv)
    j = _judged(a)
    rates = _rates(a, j)
    path, _ = write_spec(j, Path(a.template))
    common = ["--jobs", str(a.jobs), "--results_dir", a.results_dir]
    out = {}
    for size in j.sizes:
        folder = _probe_out(j, size, a.results_dir)
        done = _resumed(folder, rates.get(size))
        args = _probe_args(str(path), j, size, a.results_dir, common, a.oracle, rates)
        out[size] = (None if done else credit_probe.planned(args)[1], folder)
    return out


def _judged(a):
    """What the arguments ask to judge (bench.sweep.judge.judged checks it)."""
    import yaml

    from bench.errors import CreditBenchError
    from bench.sweep.judge import judged

    try:
        options = yaml.safe_load(a.options) if a.options else {}
    except yaml.YAMLError as e:
        raise CreditBenchError(f"--options is not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(options, dict):
        raise CreditBenchError(f"--options must be a YAML mapping of option: value, got {a.options!r}")
    sizes = tuple(s for s in a.sizes.split(",") if s.strip())
    controls = tuple(c for c in a.controls.split(",") if c.strip()) if a.controls else None
    return judged(a.method, options, a.label, a.task, sizes, controls)


def _rates(a, j) -> dict:
    """``--rates``: each named size's own rates (bench.sweep.judge.size_rates checks them)."""
    import yaml

    from bench.errors import CreditBenchError
    from bench.sweep.judge import size_rates

    try:
        raw = yaml.safe_load(a.rates) if a.rates else None
    except yaml.YAMLError as e:
        raise CreditBenchError(f"--rates is not YAML: {str(e).splitlines()[0]}") from None
    return size_rates(raw, j.sizes, "--rates")


def _resumed(out: Path, rates: dict | None) -> bool:
    """Whether the probe at ``out`` has its records, at the rates asked for (a probe at other rates is
    refused in one line rather than read as this one)."""
    from bench.errors import CreditBenchError
    from bench.sweep.judge import at_rates

    path = out / "updates.json"
    if not path.is_file():
        return False
    options = json.loads(path.read_text())["plan"]["options"]
    if not at_rates(options, rates):
        held = options.get("trajectory_lr") or "each label's own rate"
        until = lambda o: o.get("until", "decided")  # noqa: E731
        raise CreditBenchError(
            f"{out} holds a probe at other rates (arms at {options['lrs']}, trajectories at {held}, rounds until "
            f"{until(options)}): move it away to probe at the size's own (arms at {rates['lrs']}, trajectories "
            f"at {rates['lr']}, rounds until {until(rates)})"
        )
    return True


def _probe_out(j, size: str, results_dir: str) -> Path:
    """Where the probe at ``size`` writes: the sweep's probe folder at the first size, a folder per size else."""
    suffix = "" if size == j.sizes[0] else f"-{size}"
    return Path(results_dir) / "probes" / f"{j.name}{suffix}"


def _probe_args(
    spec: str, j, size: str, results_dir: str, common: list[str], oracle: bool = False, rates: dict | None = None
) -> list[str]:
    args = [spec, *common, "--out", str(_probe_out(j, size, results_dir))]
    own = (rates or {}).get(size)
    if own:  # the size's own rates: its trajectories' and its arms'
        args += ["--lrs", ",".join(f"{x:g}" for x in own["lrs"]), "--trajectory_lr", f"{own['lr']:g}"]
        args += ["--until", own["until"]] if "until" in own else []
    args += ["--placebo"] if "placebo" in j.controls else []
    args += ["--oracle"] if oracle else []
    return args + ([] if size == j.sizes[0] else ["--model", size])


def _card(j, spec: Path, results_dir: str, probes: dict) -> None:
    """Write the card from what the probes and the sweep reported, and put it on the sweep's MLflow run."""
    from bench.report.card import card, markdown
    from bench.script import write_outputs

    reports = {}
    for size in probes:
        rep = _probe_out(j, size, results_dir) / "report.json"
        if rep.is_file():
            reports[size] = json.loads(rep.read_text())
    folder = Path(results_dir) / j.name
    sweep_rep = folder / "report.json"
    files = {"spec": str(spec), **{f"probe at {s}": str(_probe_out(j, s, results_dir)) for s in reports}}
    if sweep_rep.is_file():
        files["sweep report"] = str(folder / "summary.md")
    data = card(
        j.label,
        [c for _, c in j.pairs()],
        reports,
        json.loads(sweep_rep.read_text()) if sweep_rep.is_file() else None,
        files,
    )
    md, js = write_outputs(str(folder), "card", markdown(data), data)
    _log(folder, [md, js])
    print(markdown(data))
    print(f"written: {md}, {js}")


def _log(folder: Path, paths: list) -> None:
    """The card on the sweep's MLflow parent run (where the sweep ran and recorded its store)."""
    from bench.config import default_uri
    from bench.tracking.stores import read_record

    record = read_record(folder)
    if not record:
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(default_uri())
    for p in paths:
        client.log_artifact(record["parent_run_id"], str(p), artifact_path="card")
