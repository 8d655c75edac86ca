"""``creditbench table``: a sweep's comparisons (results/<sweep>/report.json) as Markdown, CSV and
LaTeX (``--sweep``); with ``--paper NAME`` instead, a seed paper's numbers beside this suite's
(bench/report/papers); with ``--credit``, the credit table of every credit method against its twin
(bench/report/credit_table), whose judges ``--run`` runs where results are missing."""

from __future__ import annotations

from bench.errors import CreditBenchError
from bench.run.args import ArgumentParser, spell

USAGE = "table --sweep NAME [--format md|csv|tex|all] | --paper NAME [--sweep NAME ...] | --credit [--run] [--dry_run]"
HELP = "a sweep's comparisons, or a paper's numbers beside this suite's"


def main(argv: list[str]) -> int:
    if any(a == "--paper" or a.startswith("--paper=") for a in spell(argv)):
        return paper_table(argv)
    if "--credit" in spell(argv):
        return credit_table(argv)
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


def credit_table(argv: list[str]) -> int:
    """``creditbench table --credit [--definition YAML] [--run] [--dry_run] [--upto SIZE] [--per_update_only]
    [--jobs N]``."""
    from pathlib import Path

    from bench.cli import judge
    from bench.report import credit_table as ct
    from bench.report import credit_todo, oracle
    from bench.script import write_outputs

    ap = ArgumentParser(
        prog="creditbench table --credit",
        description="The credit table: every credit method against its credit-off twin, per update at each size "
        "and end to end, from the reports of each row's `creditbench judge` (results/credit/).",
    )
    ap.add_argument("--credit", action="store_true", required=True)
    ap.add_argument("--definition", default=str(ct.DEFINITION), help=f"the table's rows (default {ct.DEFINITION})")
    ap.add_argument("--run", action="store_true", help="first run each row's judge whose results are missing")
    ap.add_argument("--dry_run", action="store_true", help="with --run: print each missing judge's cost, run nothing")
    ap.add_argument("--upto", default=None, help="with --run: only the sizes up to this one (e.g. tiny-500k)")
    ap.add_argument("--per_update_only", action="store_true", help="with --run: the probes only, no sweep")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes of each judge (default 2)")
    ap.add_argument("--results_dir", default="results")
    a = ap.parse_args(argv)
    definition = Path(a.definition)
    table, results = ct.load(definition), Path(a.results_dir)
    out = definition.parent
    if a.run or a.dry_run:
        todo = credit_todo.missing(table, results, a.upto, a.per_update_only)
        print(f"credit table: {len(todo)} of {len(table.rows)} rows to judge" + (" (dry run)" if a.dry_run else ""))
        first = cap = 0.0
        for _row, args in todo:
            print(f"\n== creditbench judge {' '.join(args)}")
            argv_ = [*args, "--jobs", str(a.jobs), "--results_dir", a.results_dir]
            judge.main(argv_ + (["--dry_run"] if a.dry_run else []))
            if a.dry_run:
                costs = judge.probe_costs(argv_).values()
                first, cap = first + sum(c[0] for c in costs), cap + sum(c[1] for c in costs)
        if a.dry_run:
            hours = lambda s: f"{s / 3600 / a.jobs:.1f} h on {a.jobs} cores"  # noqa: E731
            print(f"\ncredit table: the probes' first rounds about {hours(first)}, every pair at the cap about "
                  f"{hours(cap)}; the sweeps' costs are above, each with its own")  # fmt: skip
            return 0
    data = ct.build(table, results)  # with what its records cost, from their own reports
    md, js = write_outputs(str(out), definition.stem, ct.markdown(data), data)
    for q in data["quality"]:  # the scatter of each size's credit quality against the effect
        oracle.quality_figure(q, out / q["figure"])
    print(ct.markdown(data) + f"\nwritten: {md}, {js}")
    return 0
