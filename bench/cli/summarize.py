"""``creditbench summarize --sweep NAME``: (re)write a sweep's report, tables and plots under
results/<NAME>/ from its finished runs, and log the report to the sweep's parent MLflow run."""

from __future__ import annotations

from pathlib import Path

from bench.config import default_uri
from bench.run.args import ArgumentParser

USAGE = "summarize --sweep NAME"
HELP = "(re)write a sweep's report, tables and plots"


def main(argv: list[str]) -> int:
    from bench.report.files import markdown, summarize
    from bench.sweep.spec import SweepSpec, read_spec
    from bench.tracking.stores import log_report

    ap = ArgumentParser(prog="creditbench summarize", description="Write a sweep's report from its finished runs.")
    ap.add_sweep()
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
