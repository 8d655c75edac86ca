"""``creditbench credit-maps --sweep NAME``: the per-method table of a sweep (pass@1 before and after,
where each method put its credit) from its run summaries, written to results/<NAME>/credit.md
(bench/report/credit_maps.py)."""

from __future__ import annotations

from pathlib import Path

from bench.run.args import ArgumentParser

USAGE = "credit-maps --sweep NAME [--out results/NAME/credit.md]"
HELP = "tabulate where each method of a sweep put its credit (credit.md)"


def main(argv: list[str]) -> int:
    from bench.report.credit_maps import rows, table

    ap = ArgumentParser(
        prog="creditbench credit-maps",
        description="Per-method table of a sweep: pass@1 before and after, and where each method put its credit.",
    )
    ap.add_sweep()
    ap.add_argument("--out", default=None, help="default: <results_dir>/<sweep>/credit.md")
    a = ap.parse_args(argv)
    text = table(rows(a.results_dir, a.sweep))
    out = Path(a.out or Path(a.results_dir) / a.sweep / "credit.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    return 0
