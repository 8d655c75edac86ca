"""``creditbench docs-tables [--check]``: rewrite the generated result tables of README.md and docs/
from results/ (bench/report/docs_tables.py), or with ``--check`` only name the pages that differ."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.run.args import ArgumentParser

USAGE = "docs-tables [--check]"
HELP = "rewrite the result tables of README.md and docs/ from results/"


def main(argv: list[str]) -> int:
    from bench.report.docs_tables import ROOT, pages, render

    ap = ArgumentParser(
        prog="creditbench docs-tables",
        description="Rewrite the result tables of README.md and docs/ from results/ (no number is pasted).",
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its sources")
    ap.add_argument("--root", type=Path, default=ROOT, help="the repository (README.md, docs/, results/)")
    a = ap.parse_args(argv)
    stale = []
    for page in pages(a.root):
        text = render(page, a.root / "results")
        if text != page.read_text():
            stale.append(page.relative_to(a.root).as_posix())
            if not a.check:
                page.write_text(text)
    if a.check and stale:
        print(f"out of date with results/: {', '.join(stale)} (run: creditbench docs-tables)", file=sys.stderr)
        return 1
    print(("rewrote " + ", ".join(stale)) if stale and not a.check else "every results block is current")
    return 0
