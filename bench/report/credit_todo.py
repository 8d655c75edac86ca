"""What ``creditbench table --credit --run`` runs: each row's ``creditbench judge`` whose results the table
(bench.report.credit_table) does not find yet, with the arguments that make them (``--dry_run``: their cost
first). Each judge resumes from what it wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError
from bench.report.credit_table import Row, Table, judge_sizes, probe_dir, probe_report, row_rates, sweep_dir


def judge_args(row: Row, table: Table, sizes: tuple[str, ...], per_update_only: bool) -> list[str]:
    """The ``creditbench judge`` arguments that make this row's missing results."""
    args = [row.method, "--label", row.label, "--task", table.task, "--sizes", ",".join(sizes)]
    if table.template != Table.template:
        args += ["--template", table.template]
    if row.options:
        args += ["--options", yaml.safe_dump(row.options, default_flow_style=True).strip()]
    if row.controls:
        args += ["--controls", ",".join(row.controls)]
    args += ["--oracle"] if table.oracle else []
    rates = row_rates(row, table)
    own = {s: {k: v for k, v in rates[s].items() if k != "tuned"} for s in sizes if s in rates}
    args += ["--rates", yaml.safe_dump(own, default_flow_style=True, width=1000).strip()] if own else []
    return args + (["--per_update_only"] if per_update_only else [])


def _probed(report: Path, oracle: bool, rates: dict[str, Any] | None = None) -> bool:
    """Whether the probe's report is there, at the size's rates (with oracle arms, where the table asks)."""
    rep = probe_report(report, rates)
    return rep is not None and (not oracle or bool(rep.get("oracle")))


def missing(
    table: Table, results_dir: Path = Path("results"), upto: str | None = None, per_update_only: bool = False
) -> list[tuple[Row, list[str]]]:
    """The judges still to run, each with its arguments: a row with a size it measures itself that has no
    probe report yet, or without its sweep's report (a row that names its sweep runs per update only).
    ``upto``: only the sizes up to this one (a judge's sizes stay a prefix of the row's: its first size
    names its spec and folders); ``per_update_only``: no sweep. A judge resumes: its finished probes only
    redo their reports, its sweep skips its finished runs."""
    if upto is not None and upto not in table.sizes:
        raise CreditBenchError(f"--upto {upto} is not one of the table's sizes ({', '.join(table.sizes)})")
    out = []
    for row in table.rows:
        sizes, rates = judge_sizes(row, table), row_rates(row, table)
        if upto is not None:
            sizes = tuple(s for s in sizes if table.sizes.index(s) <= table.sizes.index(upto))
        if not sizes:
            continue
        todo = [
            s
            for s in sizes
            if not _probed(probe_dir(row, s, table, results_dir) / "report.json", table.oracle, rates.get(s))
        ]
        sweep = table.end_to_end and row.sweep is None and not per_update_only
        need_sweep = sweep and not (sweep_dir(row, results_dir) / "report.json").is_file()
        if todo or need_sweep:
            out.append((row, judge_args(row, table, sizes, per_update_only=not sweep)))
    return out
