"""``creditbench reproduce SPEC``: check that committed results are what the code at this commit
produces -- rerun the sweep (or only ``--labels``' committed runs) from scratch and compare with the
committed ``results/<sweep>/`` (bench/reproduce/rerun.py). The Hub is offline unless HF_HUB_OFFLINE
says otherwise: a rerun reads the data the sweep read."""

from __future__ import annotations

import os

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser

USAGE = "reproduce SPEC.yaml [--jobs 2] [--mode auto|exact|statistical] [--labels LABEL ... [--tuning]]"
HELP = "rerun a sweep (or some labels) and compare with its committed results"


def main(argv: list[str]) -> int:
    from bench.reproduce.rerun import MODES, rerun_labels, rerun_sweep

    ap = ArgumentParser(
        prog="creditbench reproduce",
        description="Check that committed results are what the code at this commit produces: rerun a sweep "
        "from scratch into a scratch folder and MLflow store, and compare with results/<sweep>/report.json.",
    )
    ap.add_argument("spec", help="a sweep spec whose results/<name>/report.json is committed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--results_dir", default="results", help="where the committed report is (default results)")
    ap.add_argument("--keep", default=None, help="rerun into this folder (kept) instead of a temporary one")
    ap.add_argument("--mode", choices=MODES, default="auto", help="exact where the numerics match (auto), or force one")
    ap.add_argument("--alpha", type=float, default=0.05, help="family-wise level of the statistical check")
    ap.add_argument("--fresh_report", default=None, help="check this report.json instead of rerunning the sweep")
    ap.add_argument("--labels", nargs="+", default=None, help="rerun only these labels' committed runs, run by run")
    ap.add_argument("--tuning", action="store_true", help="with --labels: the spec's tuning sweep's runs")
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.tuning and not a.labels:
        raise CreditBenchError("--tuning reruns a tuning sweep's labels: give them with --labels")
    if a.labels:
        from bench.sweep.sweep import load_spec

        sweep = load_spec(a.spec, a.results_dir, tuning=a.tuning)
        return rerun_labels(sweep, a.labels, a.results_dir, a.jobs, a.keep)
    return rerun_sweep(
        a.spec, a.results_dir, a.jobs, keep=a.keep, mode=a.mode, alpha=a.alpha, fresh_report=a.fresh_report
    )
