"""``creditbench curves``: overlay labels' eval pass@1 against samples (a PNG)."""

from __future__ import annotations

from bench.run.args import ArgumentParser

USAGE = "curves --sweep NAME --labels A B --task T"
HELP = "overlay labels' learning curves (PNG)"


def main(argv: list[str]) -> int:
    ap = ArgumentParser(prog="creditbench curves", description="Overlay labels' eval pass@1 vs samples (PNG).")
    ap.add_sweep()
    ap.add_argument("--labels", nargs="+", required=True, help="two or more of the sweep's labels")
    ap.add_argument("--task", required=True, help="the training task (its eval curve is drawn)")
    ap.add_argument("--model", default=None, help="needed when the sweep trains several models on the task")
    ap.add_argument("--out", default=None, help="PNG path (default: results/<sweep>/curves_<task>_<labels>.png)")
    a = ap.parse_args(argv)
    from bench.report.export import curves

    print(curves(a.results_dir, a.sweep, a.labels, a.task, a.model, a.out))
    return 0
