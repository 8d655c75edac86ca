"""The ``creditbench`` command line.

creditbench train --config run.yaml [--rl.steps 50 ...]   one RL run (typed YAML config)
creditbench eval --model PATH_OR_ID --task NAME [--n 16 --k 1,4,16]   pass@k of a checkpoint
creditbench sweep SPEC.yaml [--jobs N] [--ray [ADDR]] [--dry_run]   methods x models x seeds, then the report
creditbench summarize --sweep NAME                         (re)write results/<NAME>/ report, tables, plots
creditbench table --paper NAME [--sweep NAME ...]          a paper's numbers beside this suite's
creditbench table --sweep NAME [--format md|csv|tex|all]   a sweep's comparisons as comparisons.{md,csv,tex}
creditbench curves --sweep NAME --labels A B --task T      overlay labels' pass@1 curves (PNG)
creditbench credit-probe SPEC.yaml [--batches N --lrs A,B --jobs N --dry_run]   credit per update: paired updates
creditbench methods | tasks [NAME]                         list the registries, or one entry's options
creditbench ui [--port 5000]                               MLflow UI on 127.0.0.1
creditbench server [--host H --port 5000] | --stop         shared MLflow tracking server (PostgreSQL)
creditbench slurm SPEC.yaml [--nodes N --gpus_per_node G --time T --uri URI]   sbatch script: a Ray cluster + the sweep
creditbench fetch NAME [--force]                           cache a pretrained model (qwen2.5-coder-0.5b-instruct)
creditbench bases build TASK... [--fresh --pin] | pin DIR... | verify   the tiny bases: warm-start, pin, check
creditbench --version
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.run.args import ArgumentParser, quiet_libraries
from bench.tracking.tracking import default_uri


def cmd_train(argv: list[str]) -> int:
    from bench.errors import CreditBenchError
    from bench.run.args import from_files, run_config, spell
    from bench.run.resolve import preflight
    from bench.run.train import run, summary_line

    try:
        cfg = run_config(argv)  # --help prints every setting and exits
    except CreditBenchError as e:
        return _fail(str(e))
    progress = "--no_progress" not in spell(argv)
    try:
        checked = preflight(cfg)
    except CreditBenchError as e:  # a bad value in a run YAML: its file and line
        raise CreditBenchError(from_files(argv, str(e))) from None
    from bench.sweep.sweep import result_writer

    res = run(cfg, progress=progress, checked=checked, on_result=result_writer(cfg))
    from bench.distributed import rank

    if rank() > 0:  # the other processes of a multi-process run: rank 0 reports
        return 0
    print(summary_line(res))
    return 0


def _fail(msg: str) -> int:
    print(f"creditbench: error: {msg}", file=sys.stderr)
    return 2


def cmd_list(kind: str, argv: list[str] = ()) -> int:
    from bench.registry import METHODS, TASKS

    reg = METHODS if kind == "methods" else TASKS
    if argv:  # one entry's options, with their defaults and documentation
        from bench.report.fields import describe

        if len(argv) > 1 or argv[0].startswith("-"):
            return _fail(f"usage: creditbench {kind} [NAME]; valid names: {', '.join(reg.names())}")
        print(describe(kind, argv[0], reg.get(argv[0])))
        return 0
    width = max(map(len, reg.names()))
    for name in reg.names():
        obj = reg.get(name)
        extra = f"  [{obj.paper}]" if kind == "methods" else f"  (v{obj.VERSION})"
        print(f"{name:<{width}}  {obj.description}{extra}")
    return 0


def cmd_ui(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench ui", description="Serve the MLflow UI on 127.0.0.1.")
    ap.add_argument("--uri", default=default_uri())
    ap.add_argument("--port", type=int, default=5000)
    a = ap.parse_args(argv)
    from bench.tracking.tracking import check_tracking_uri

    check_tracking_uri(a.uri)
    if a.uri.lower().startswith(("http://", "https://")):  # a tracking server serves its own UI
        return _server_ui(a.uri)
    if a.uri.startswith("sqlite:///") and not Path(a.uri[len("sqlite:///") :]).expanduser().is_file():
        return _fail(f"no MLflow store at {a.uri} (run a sweep or `creditbench train` first, or give --uri)")
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        a.uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(a.port),
        "--workers",
        "1",
    ]
    print(f"MLflow UI for {a.uri} on http://127.0.0.1:{a.port} (Ctrl-C to stop); the runs, in training mode:")
    _experiment_links(a.uri, f"http://127.0.0.1:{a.port}")
    sys.stdout.flush()  # before exec replaces the process
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")  # no background job workers
    os.execv(sys.executable, cmd)


def _experiment_links(uri: str, ui: str) -> None:
    """Print the UI link of every experiment of the suite in the store at ``uri``, in training mode."""
    from bench.tracking.tracking import TRAINING_KIND, client

    # MLflow 3.17 keeps its GenAI / Model training switch per browser (GenAI until changed) and the
    # experiments' kind tag does not override it; the workflowType parameter does
    for e in client(uri).search_experiments():
        if e.tags.get("mlflow.experimentKind") == TRAINING_KIND or e.name.startswith("creditbench"):
            print(f"  {e.name}: {ui}/#/experiments/{e.experiment_id}/runs?workflowType=machine_learning")


def _server_ui(uri: str) -> int:
    """An http(s) store is a tracking server (e.g. ``creditbench server``), which serves the UI itself:
    its address and the experiments' links, and no second UI."""
    from bench.tracking.tracking import redact

    ui = redact(uri).rstrip("/")
    print(f"MLflow UI of the tracking server: {ui} (it serves the UI itself); the runs, in training mode:")
    _experiment_links(uri, ui)
    return 0


def cmd_summarize(argv: list[str]) -> int:
    from bench.report.files import markdown, summarize
    from bench.sweep.spec import SweepSpec, read_spec
    from bench.tracking.stores import log_report

    ap = ArgumentParser(prog="creditbench summarize", description="Write a sweep's report from its finished runs.")
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--results_dir", default="results")
    ap.add_argument("--no_plots", action="store_true")
    ap.add_argument(
        "--uri",
        default=None,
        help="MLflow store whose parent run of the sweep gets the report, if it holds the one recorded in "
        "results/<sweep>/store.json (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)",
    )
    a = ap.parse_args(argv)
    out = Path(a.results_dir) / a.sweep
    a.uri = a.uri or default_uri()  # never the path store.json records: that store may be another checkout's
    report, written = summarize(a.results_dir, a.sweep, plots=not a.no_plots)
    spec = read_spec(out / "sweep.yaml") if (out / "sweep.yaml").is_file() else None  # the spec the sweep ran
    parent, why = log_report(out, a.uri, spec.experiment if spec else SweepSpec.experiment, a.sweep)
    print(markdown(report))
    print("\nwritten: " + ", ".join(str(p) for p in written))
    if parent:
        print(f"logged to the sweep's parent MLflow run {parent} in {a.uri} (artifacts: report/)")
    else:
        print(f"not logged to MLflow: {why}")
    return 0


def cmd_table(argv: list[str]) -> int:
    from bench.errors import CreditBenchError
    from bench.run.args import spell

    if any(a == "--paper" or a.startswith("--paper=") for a in spell(argv)):
        from bench.report.papers import main as paper_table

        return paper_table(argv)
    ap = ArgumentParser(
        prog="creditbench table",
        description="A sweep's comparisons (results/<sweep>/report.json) as Markdown, CSV and LaTeX; with "
        "--paper NAME instead, a paper's numbers beside this suite's (creditbench table --paper NAME --help).",
    )
    ap.add_argument("--sweep", help="the sweep (results/<sweep>/report.json); one of --paper or --sweep is required")
    ap.add_argument("--format", choices=("md", "csv", "tex", "all"), default="all")
    ap.add_argument("--results_dir", "--results", default="results", help="where the sweeps' folders are")
    ap.add_argument("--out", default=None, help="folder for comparisons.{md,csv,tex} (default: the sweep's)")
    a = ap.parse_args(argv)
    if a.sweep is None:
        raise CreditBenchError("creditbench table: one of --paper NAME or --sweep NAME is required")
    from bench.report.export import write_tables

    table, written = write_tables(a.results_dir, a.sweep, a.format, a.out)
    print(table + "\nwritten: " + ", ".join(map(str, written)))
    return 0


def cmd_curves(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench curves", description="Overlay labels' eval pass@1 vs samples (PNG).")
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--labels", nargs="+", required=True, help="two or more of the sweep's labels")
    ap.add_argument("--task", required=True, help="the training task (its eval curve is drawn)")
    ap.add_argument("--model", default=None, help="needed when the sweep trains several models on the task")
    ap.add_argument("--results_dir", "--results", default="results", help="where the sweeps' folders are")
    ap.add_argument("--out", default=None, help="PNG path (default: results/<sweep>/curves_<task>_<labels>.png)")
    a = ap.parse_args(argv)
    from bench.report.export import curves

    print(curves(a.results_dir, a.sweep, a.labels, a.task, a.model, a.out))
    return 0


def cmd_bases(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench bases", description="Build, pin and verify the tiny base checkpoints.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="warm-start the bases of tasks (default options and settings) into a cache")
    b.add_argument("tasks", nargs="+")
    b.add_argument("--size", default="tiny-500k")
    b.add_argument("--cache_dir", default=".creditbench/cache")
    b.add_argument("--tracking_uri", default="sqlite:///mlflow.db")
    b.add_argument("--fresh", action="store_true", help="warm-start from scratch even where a base is pinned")
    b.add_argument("--pin", action="store_true", help="then pin them (copy into results/bases, record the digest)")
    p = sub.add_parser("pin", help="pin built bases: copy them into results/bases and record their digests")
    p.add_argument("folders", nargs="+", help="base checkpoint folders (.creditbench/cache/base/<task>/<size>-<key>)")
    sub.add_parser("verify", help="check every pinned base against its digest")
    a = ap.parse_args(argv)
    import json

    from bench.bases import bases, warmstart

    if a.cmd == "build":
        for task_name in a.tasks:
            out = warmstart.build_base(task_name, a.size, a.cache_dir, a.tracking_uri, a.fresh)
            info = json.loads((out / "warmstart.json").read_text())
            print(f"{bases.key_of(out)}: step {info['steps']}, check accuracy {info['check_accuracy']} in {out}")
            if a.pin:
                bases.pin(out)
        return 0
    if a.cmd == "pin":
        for folder in a.folders:
            entry = bases.pin(Path(folder))
            digest, acc = entry["weights_sha256"][:16], entry["check_accuracy"]
            print(f"pinned {bases.key_of(Path(folder))}: sha256 {digest}, check accuracy {acc}")
        return 0
    bad = 0
    for key, entry in bases.pins().items():
        got = bases.weights_sha256(bases.PINNED / key)
        ok = got == entry["weights_sha256"]
        bad += not ok
        want = entry["weights_sha256"]
        print(f"{key}: ok" if ok else f"{key}: DIFFERS (sha256 {got[:16]} != {want[:16]})")
    return 1 if bad else 0


COMMANDS = {
    "train": "one RL run",
    "eval": "pass@k of a checkpoint on a task",
    "sweep": "run a sweep spec",
    "summarize": "report of a sweep",
    "table": "a sweep's comparisons, or a paper's numbers beside this suite's",
    "curves": "overlay labels' learning curves",
    "credit-probe": "credit per update: each credit method vs its twin on the same batch, scored on J",
    "methods": "list methods",
    "tasks": "list tasks",
    "ui": "MLflow UI on 127.0.0.1",
    "server": "shared MLflow tracking server on PostgreSQL",
    "slurm": "sbatch script that runs a sweep on a Ray cluster across a SLURM allocation",
    "fetch": "download and cache a pretrained model",
    "bases": "build, pin and verify the tiny base checkpoints",
}


def main(argv: list[str] | None = None) -> int:
    from bench.errors import CreditBenchError, did_you_mean

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"creditbench {version('creditbench')}")
        return 0
    cmd, rest = argv[0], argv[1:]
    quiet_libraries()
    try:
        if cmd not in COMMANDS:
            raise did_you_mean("command", cmd, COMMANDS)
        if cmd == "train":
            return cmd_train(rest)
        if cmd == "eval":
            from bench.run.evaluate import main as cmd_eval

            return cmd_eval(rest)
        if cmd in ("methods", "tasks"):
            return cmd_list(cmd, rest)
        if cmd == "ui":
            return cmd_ui(rest)
        if cmd == "server":
            from bench.sweep.server import main as cmd_server

            return cmd_server(rest)
        if cmd == "slurm":
            from bench.sweep.slurm import main as cmd_slurm

            return cmd_slurm(rest)
        if cmd == "fetch":
            from bench.models.pretrained import main as cmd_fetch

            return cmd_fetch(rest)
        if cmd == "sweep":
            from bench.cli.sweep import main as cmd_sweep

            return cmd_sweep(rest)
        if cmd == "bases":
            return cmd_bases(rest)
        if cmd == "credit-probe":
            from bench.cli.probe import main as cmd_probe

            return cmd_probe(rest)
        if cmd == "table":
            return cmd_table(rest)
        if cmd == "curves":
            return cmd_curves(rest)
        return cmd_summarize(rest)
    except CreditBenchError as e:
        return _fail(str(e))
    except KeyboardInterrupt as e:  # one line (a sweep has said what it stopped); the shell's status for Ctrl-C
        from bench.sweep.launch import SweepInterrupted

        if not isinstance(e, SweepInterrupted):
            print("creditbench: interrupted", file=sys.stderr)
        return 130
