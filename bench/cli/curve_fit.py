"""``creditbench curve-fit --sweep NAME``: ScaleRL's saturating curve of pass@1 against training
samples, fitted per (label, model, task) with bootstrap intervals over seeds, as a Markdown table
(bench/report/curve_fit.py)."""

from __future__ import annotations

from bench.run.args import ArgumentParser

USAGE = "curve-fit --sweep NAME [--n_boot 1000 --seed 0]"
HELP = "fit ScaleRL's saturating compute curve to a sweep's runs"


def main(argv: list[str]) -> int:
    from bench.report.curve_fit import fit_sweep, markdown_lines
    from bench.run.result import load_runs

    ap = ArgumentParser(
        prog="creditbench curve-fit",
        description="ScaleRL's saturating curve of pass@1 against training compute, fitted per (label, model, task).",
    )
    ap.add_sweep()
    ap.add_argument("--n_boot", type=int, default=1000, help="bootstrap resamples of the seeds (default: 1000)")
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed (default: 0)")
    a = ap.parse_args(argv)
    print("\n".join(markdown_lines(fit_sweep(load_runs(a.results_dir, a.sweep), n_boot=a.n_boot, seed=a.seed))))
    return 0
