"""``creditbench table``: a sweep's comparisons (results/<sweep>/report.json) as Markdown, CSV and
LaTeX (``--sweep``); with ``--paper NAME`` instead, a seed paper's numbers beside this suite's
(bench/report/papers)."""

from __future__ import annotations

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser, spell

USAGE = "table --sweep NAME [--format md|csv|tex|all] | --paper NAME [--sweep NAME ...]"
HELP = "a sweep's comparisons, or a paper's numbers beside this suite's"


def main(argv: list[str]) -> int:
    if any(a == "--paper" or a.startswith("--paper=") for a in spell(argv)):
        return paper_table(argv)
    ap = ArgumentParser(
        prog="creditbench table",
        description="A sweep's comparisons (results/<sweep>/report.json) as Markdown, CSV and LaTeX; with "
        "--paper NAME instead, a paper's numbers beside this suite's (creditbench table --paper NAME --help).",
    )
    ap.add_sweep(required=False, help="the sweep (results/<sweep>/report.json); one of --paper or --sweep is required")
    ap.add_argument("--format", choices=("md", "csv", "tex", "all"), default="all")
    ap.add_argument("--out", default=None, help="folder for comparisons.{md,csv,tex} (default: the sweep's)")
    a = ap.parse_args(argv)
    if a.sweep is None:
        raise CreditBenchError("creditbench table: one of --paper NAME or --sweep NAME is required")
    from bench.report.export import write_tables

    table, written = write_tables(a.results_dir, a.sweep, a.format, a.out)
    print(table + "\nwritten: " + ", ".join(map(str, written)))
    return 0


def paper_table(argv: list[str]) -> int:
    """``creditbench table --paper NAME [--sweep SWEEP ...] [--results_dir results]``."""
    from bench.report.papers import table
    from bench.report.papers.data import paper_names

    ap = ArgumentParser(
        prog="creditbench table",
        description="A seed paper's verified numbers beside this suite's measured ones (Markdown).",
    )
    ap.add_argument("--paper", required=True, help=f"a paper file in results/papers ({', '.join(paper_names())})")
    ap.add_argument(
        "--sweep",
        action="append",
        default=None,
        help="a sweep whose results/<SWEEP>/report.json to read; repeat for several (first match "
        "wins); default: the paper's own sweep spec's name",
    )
    ap.add_argument("--results_dir", default="results", help="where the sweeps' folders are (default: results)")
    ap.add_argument(
        "--papers_dir", default=None, help="where the paper YAMLs are (default: the shipped results/papers)"
    )
    a = ap.parse_args(argv)
    print(table(a.paper, a.sweep, a.results_dir, a.papers_dir))
    return 0
