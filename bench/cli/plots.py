"""``creditbench plots REPORT OUT_DIR``: the sweep report's figures (PNG) from
results/<sweep>/report.json into a folder (bench/report/plots), one written path a line."""

from __future__ import annotations

import json
from pathlib import Path

from bench.run.args import ArgumentParser

USAGE = "plots results/SWEEP/report.json OUT_DIR"
HELP = "draw a sweep report's figures (PNG) from its report.json"


def main(argv: list[str]) -> int:
    from bench.errors import CreditBenchError
    from bench.report.plots import write_plots

    ap = ArgumentParser(prog="creditbench plots", description="Draw the sweep report's figures from its report.json.")
    ap.add_argument("report", type=Path, help="results/<sweep>/report.json")
    ap.add_argument("out_dir", type=Path, help="folder for the PNG files (created if needed)")
    a = ap.parse_args(argv)
    try:
        report = json.loads(a.report.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CreditBenchError(f"cannot read {a.report}: {e}") from None
    for path in write_plots(report, a.out_dir):
        print(path)
    return 0
