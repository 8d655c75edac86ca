"""The credit table (``creditbench table --credit``): every registered credit method against its credit-off
twin, per update at each model size (the credit probe's trajectory-level comparison) and end to end at
the first size (the sweep's sequential decision), one row a method, read from what ``creditbench judge``
wrote for it (or, for a row that names them, another sweep and probe, e.g. the flagship's).

The table's definition is a YAML file (``results/credit/table.yaml``): the task, the sizes, and the rows
(a registered method, its options, its label, and optionally where its results already are). Its
outputs, ``results/credit/table.{md,json}``, are generated from the reports alone; README.md quotes
the Markdown table through ``creditbench docs-tables``. ``end_to_end: false`` makes a table per update
only (the control task's, ``results/credit/control.yaml``), ``template`` the spec whose design the
judges take, ``rates`` a size's own rates (size -> ``{lr, lrs}``: the probe's reference trajectories
train at ``lr``, its arms update at ``lrs``, the cell sits at ``lr``; a size not named takes the
template's; a row's own ``rates`` replace the table's for that row, e.g. a row under LoRA). What
``--run`` runs where results are missing: bench.report.credit_todo.

A cell is **resolved** (the table's target, one rule) where the comparison has a verdict (better,
worse, equivalent) or its interval is within the target (bench.report.per_update.within_target: ±10%
of the twin's gain either side, or ±0.3 points of J where the twin gains less than 3 points); otherwise
the cell says "not resolved". A size whose ``rates`` say ``until: resolved`` has its probes stop a pair's
rounds there (the probe's option ``until``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError
from bench.report import oracle
from bench.report.per_update import within_target
from bench.script import md_table
from bench.stats import format as fmt
from bench.sweep.judge import at_rates, size_rates

DEFINITION = Path("results/credit/table.yaml")


@dataclass(frozen=True)
class Row:
    """One method of the table: what ``creditbench judge`` is given, and where its results are read."""

    method: str
    label: str
    options: dict[str, Any] = field(default_factory=dict)
    controls: tuple[str, ...] = ()
    why: str = ""
    sweep: str | None = None
    """The sweep whose end-to-end decision the row reads (default: judge-<label>)."""
    probes: dict[str, str] = field(default_factory=dict)
    """Size -> probe folder under results/ read per update (default: the judge's, bench.cli.judge)."""
    rates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Size -> the row's own rates there in place of the table's (a row under LoRA, whose rate the size's
    full-parameter tuning does not give), checked as the table's."""


@dataclass(frozen=True)
class Table:
    name: str
    """The definition's file stem: the table's files are <name>.md, <name>.json, <name>-quality-<size>.png."""
    task: str
    sizes: tuple[str, ...]
    rows: tuple[Row, ...]
    end_to_end: bool = True
    """False: per update only (a control task's table), each judge with --per_update_only."""
    template: str = "results/sweeps/embedded.yaml"
    """The sweep spec whose design each judge takes (judge --template)."""
    ceiling: dict[str, str] = field(default_factory=dict)
    """Size -> a probe folder with oracle arms (``credit-probe --oracle``) whose shares of the oracle's effect
    the rows read where their own probe has none (bench.report.oracle)."""
    oracle: bool = False
    """True: each judge's probes also run the twin's oracle (judge --oracle), so each row's share is
    measured on its own probe's batches; a probe report without oracle arms is then missing."""
    rates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Size -> its own rates ``{lr, lrs}`` (bench.sweep.judge.size_rates), given to each judge (--rates); a
    probe there at other rates is not the table's."""


def load(path: Path = DEFINITION) -> Table:
    """The table's definition, each row checked as judge checks it (one line for a bad method, option,
    control or label)."""
    if not path.is_file():
        raise CreditBenchError(f"the credit table's definition {path} not found")
    raw = yaml.safe_load(path.read_text()) or {}
    keys = ("task", "sizes", "rows", "end_to_end", "template", "ceiling", "oracle", "rates")
    unknown = set(raw) - set(keys)
    if unknown:
        raise CreditBenchError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} (valid: {', '.join(keys)})")
    end_to_end, template = raw.get("end_to_end", True), str(raw.get("template", Table.template))
    if not isinstance(end_to_end, bool):
        raise CreditBenchError(f"{path}: end_to_end must be true or false, got {end_to_end!r}")
    task, sizes = raw.get("task", "chain"), tuple(raw.get("sizes") or ())
    if not sizes:
        raise CreditBenchError(f"{path}: sizes needs at least one model size")
    rows = [_row(entry, path, task, sizes, end_to_end) for entry in raw.get("rows") or []]
    if not rows:
        raise CreditBenchError(f"{path}: no rows")
    labels = [r.label for r in rows]
    if len(set(labels)) != len(labels):
        raise CreditBenchError(f"{path}: two rows share a label; give one of them another label")
    ceiling = {str(k): str(v) for k, v in (raw.get("ceiling") or {}).items()}
    if set(ceiling) - set(sizes):
        raise CreditBenchError(f"{path}: ceiling names sizes the table does not have")
    oracle = raw.get("oracle", False)
    if not isinstance(oracle, bool):
        raise CreditBenchError(f"{path}: oracle must be true or false, got {oracle!r}")
    rates = size_rates(raw.get("rates"), sizes, f"{path}: rates")
    return Table(path.stem, task, sizes, tuple(rows), end_to_end, template, ceiling, oracle, rates)


def _row(entry: dict[str, Any], path: Path, task: str, sizes: tuple[str, ...], end_to_end: bool) -> Row:
    from bench.sweep.judge import judged

    extra = set(entry) - {"method", "label", "options", "controls", "why", "sweep", "probes", "rates"}
    if extra or "method" not in entry:
        raise CreditBenchError(
            f"{path}: a row needs method and may have label, options, controls, why, sweep, probes, rates; got "
            f"{', '.join(sorted(entry))}"
        )
    controls = tuple(entry.get("controls") or ())
    j = judged(entry["method"], entry.get("options"), entry.get("label"), task, sizes, controls or None)
    probes = {str(k): str(v) for k, v in (entry.get("probes") or {}).items()}
    if set(probes) - set(sizes):
        raise CreditBenchError(f"{path}: row {j.label}'s probes name sizes the table does not have")
    if sizes[0] in probes and end_to_end and not entry.get("sweep"):
        raise CreditBenchError(f"{path}: row {j.label} reads its {sizes[0]} probe elsewhere: name its sweep too")
    rates = size_rates(entry.get("rates"), sizes, f"{path}: row {j.label}'s rates")
    return Row(j.method, j.label, j.options, j.controls, entry.get("why", ""), entry.get("sweep"), probes, rates)


def row_rates(row: Row, table: Table) -> dict[str, dict[str, Any]]:
    """Size -> the rates the row's probe runs at there: the row's own where it has them, else the table's."""
    return table.rates | row.rates


def judge_sizes(row: Row, table: Table) -> tuple[str, ...]:
    """The sizes the row's judge measures: those without a probe of the row's own entry."""
    return tuple(s for s in table.sizes if s not in row.probes)


def probe_dir(row: Row, size: str, table: Table, results_dir: Path) -> Path:
    """Where the row's probe at ``size`` is: its own entry, else where judge writes it (its first size in
    the judge's probe folder, a folder per size else; bench.cli.judge)."""
    if size in row.probes:
        return results_dir / row.probes[size]
    suffix = "" if size == judge_sizes(row, table)[0] else f"-{size}"
    return results_dir / "probes" / f"judge-{row.label}{suffix}"


def sweep_dir(row: Row, results_dir: Path) -> Path:
    return results_dir / (row.sweep or f"judge-{row.label}")


def resolved(c: dict[str, Any]) -> bool:
    """The table's rule (module docstring) for one comparison of the probe's report."""
    if c.get("verdict", "").split(" ")[0] in ("better", "worse", "equivalent"):
        return True
    return within_target(c["lo"], c["hi"], c.get("gain_control") or 0.0)


def _cell(
    report: dict[str, Any], label: str, later: float | None = None, own: str | None = None
) -> dict[str, Any] | None:
    """The row's per-update cell from a probe's report: the comparison with its twin at the pair's tuned
    rate where the probe has one; else at ``later`` (the rate tuned for both arms after the probe ran) where
    it is one of the probe's common rates (``own``: "size" or "row", whose own rate it is); else at its
    lowest common rate. The words across rates by rule."""
    twin = f"{label}-twin"
    comps = [c for c in report.get("comparisons", []) if (c["method"], c["control"]) == (label, twin)]
    if not comps:
        return None
    at = _at(comps, "lr_method", later)
    reading = next((r["rates"] for r in report.get("readings", []) if (r["method"], r["control"]) == (label, twin)), "")
    keep = ("setting", "lr_method", "mean", "lo", "hi", "verdict", "n", "gain_control", "relative", "mde")
    out = {k: at[k] for k in keep if k in at} | {"reading": reading, "resolved": resolved(at)}
    if at.get("setting") != "tuned" and at["lr_method"] == later:
        out |= {"size_rate": own} if own else {"tuned_later": True}
    return out


def _at(rows: list[dict[str, Any]], lr: str, later: float | None) -> dict[str, Any]:
    """The row at the tuned setting, else at ``later`` among the common rates, else at the lowest rate."""
    tuned = [r for r in rows if r["setting"] == "tuned"]
    common = [r for r in rows if r["setting"] != "tuned"]
    return (tuned or [r for r in common if r[lr] == later] or [min(common or rows, key=lambda r: r[lr])])[0]


def tuned_later(row: Row, results_dir: Path) -> float | None:
    """The rate the row's sweep tuned for the method and its twin alike (results/<sweep>/tuning.json), or
    None where it has none or the two differ (then no common rate is the pair's tuned comparison)."""
    path = sweep_dir(row, results_dir) / "tuning.json"
    if not path.is_file():
        return None
    chosen = json.loads(path.read_text()).get("labels", {})
    rates = {(chosen.get(x) or {}).get("chosen", {}).get("lr") for x in (row.label, f"{row.label}-twin")}
    return rates.pop() if len(rates) == 1 else None


def _share(reports: list[dict[str, Any]], label: str, later: float | None = None) -> dict[str, Any] | None:
    """The row's share of its twin's oracle's effect from the first report that has one: at the tuned rates
    where it has them, else at ``later`` (as in ``_cell``), else at the lowest common rate."""
    for rep in reports:
        rows = [r for r in rep.get("oracle") or [] if r["method"] == label]
        if rows:
            at = _at(rows, "lr", later)
            keep = ("setting", "lr", "n", "method_effect", "oracle_effect", "oracle_lo", "oracle_hi", "share")
            return {k: at[k] for k in keep if k in at} | {"probe": rep.get("sweep")}
    return None


def _check_rates(table: Table, results_dir: Path) -> None:
    """A size's rate (the table's or a row's) that names its tuning (``tuned: SWEEP``) is the one that tuning
    chose for its pair."""
    for size, r in [*table.rates.items(), *[x for row in table.rows for x in row.rates.items()]]:
        path = results_dir / r.get("tuned", "") / "tuning.json"
        chosen = {(x.get("chosen") or {}).get("lr") for x in json.loads(path.read_text())["labels"].values()} if (
            "tuned" in r and path.is_file()) else {r["lr"]}  # fmt: skip
        if chosen != {r["lr"]}:
            raise CreditBenchError(f"rates: {size}'s lr {r['lr']:g} is not what {path} chose ({sorted(chosen)})")


def probe_report(path: Path, rates: dict[str, Any] | None) -> dict[str, Any] | None:
    """The probe's report, where it is there and at the size's own rates (where the table gives them)."""
    rep = json.loads(path.read_text()) if path.is_file() else None
    return rep if rep is not None and at_rates(rep.get("options") or {}, rates) else None


def _decision(report: dict[str, Any] | None, label: str) -> dict[str, Any] | None:
    from bench.report.card import _decision as decision

    return decision(report, label, f"{label}-twin")


def build(table: Table, results_dir: Path = Path("results")) -> dict[str, Any]:
    """The table's data from the reports on disk: per row, a cell per size (None: not measured yet) and
    the end-to-end decision at the first size (None: not run yet)."""
    _check_rates(table, results_dir)
    rows = []
    for row in table.rows:
        cells = {}
        for size in table.sizes:  # a rate tuned after the probe is the first size's (the sweep's model)
            later = tuned_later(row, results_dir) if size == table.sizes[0] else None
            rates = row_rates(row, table).get(size)
            later = rates["lr"] if rates else later
            own = probe_report(probe_dir(row, size, table, results_dir) / "report.json", rates)
            whose = ("row" if size in row.rates else "size") if rates else None
            cells[size] = _cell(own, row.label, later, whose) if own else None
            ceiling = results_dir / table.ceiling[size] / "report.json" if size in table.ceiling else None
            reports = [
                r for r in (own, json.loads(ceiling.read_text()) if ceiling and ceiling.is_file() else None) if r
            ]
            if cells[size] is not None:
                cells[size]["oracle"] = _share(reports, row.label, later)
                cells[size]["quality"] = oracle.label_quality(reports, row.label)
        srep = sweep_dir(row, results_dir) / "report.json"
        end = _decision(json.loads(srep.read_text()), row.label) if srep.is_file() and table.end_to_end else None
        kept = {s: len(list((probe_dir(row, s, table, results_dir) / "partial").glob("trajectory-*.json")))
                for s in table.sizes if cells[s] is None}  # fmt: skip
        rows.append({"method": row.method, "label": row.label, "options": row.options, "why": row.why,
                     "per_update": cells, "end_to_end": end, "kept": {s: n for s, n in kept.items() if n}})  # fmt: skip
    quality = [oracle.across(rows, size, f"{table.name}-quality-{size}.png") for size in table.sizes]
    cost = _cost(table, results_dir)
    done = sum(c is not None for r in rows for c in r["per_update"].values())
    resolved_ = sum(bool(c and c["resolved"]) for r in rows for c in r["per_update"].values())
    return {"task": table.task, "sizes": list(table.sizes), "end_to_end": table.end_to_end, "rows": rows,
            "cells": {"measured": done, "resolved": resolved_, "total": len(rows) * len(table.sizes)},
            "decided": sum(bool(r["end_to_end"]) and not r["end_to_end"]["verdict"].startswith("inconclusive")
                           for r in rows), "quality": [q for q in quality if q["points"]], "cost": cost}  # fmt: skip


def _cost(table: Table, results_dir: Path) -> dict[str, float]:
    """What the table's records cost, from their own reports, each folder counted once (rows may share a
    probe or a sweep): the probes' wall time (``wall_s`` of each probe's report), the tuning's wall time and
    the rounds' run time (a sweep report's ``tuning.wall_s`` and ``compute_s``: the sum of its runs' seconds,
    which its workers share)."""
    probes = {probe_dir(r, size, table, results_dir) for r in table.rows for size in table.sizes}
    sweeps = {sweep_dir(r, results_dir) for r in table.rows} if table.end_to_end else set()
    read = lambda d: json.loads((d / "report.json").read_text()) if (d / "report.json").is_file() else {}  # noqa: E731
    out = {
        "probes_wall_s": sum(read(d).get("wall_s") or 0.0 for d in probes),
        "tuning_wall_s": 0.0,
        "rounds_run_s": 0.0,
    }
    for d in sweeps:
        rep = read(d)
        out["tuning_wall_s"] += (rep.get("tuning") or {}).get("wall_s") or 0.0
        out["rounds_run_s"] += rep.get("compute_s") or 0.0
    return {k: round(v, 1) for k, v in out.items()}


def rate(c: dict[str, Any]) -> str:
    """The rate a cell sits at, in words: ``tuned lr R`` (the pair's tuned rate), ``the size's lr R``, ``the row's
    own lr R`` (a row's own rates at a size), or ``lr R``."""
    at = "tuned lr" if c.get("setting") == "tuned" or c.get("tuned_later") else "lr"
    at = {"size": "the size's lr", "row": "the row's own lr"}.get(c.get("size_rate"), at)
    return f"{at} {c['lr_method']:g}"


def _update_text(c: dict[str, Any] | None, kept: int = 0) -> str:
    if c is None:  # an interrupted probe's kept trajectories (bench.paired.journal): it resumes from them
        noun = "trajectory" if kept == 1 else "trajectories"
        return "not measured yet" + (f" (under way: {kept} {noun} kept)" if kept else "")
    rel = c.get("relative") or {}
    share = f", {fmt.rounded(100 * rel['mean'], 0, signed=True)}% of the twin's gain" if rel else ""
    if not rel and "gain_control" in c:  # no share: the twin's own gain is not resolved above 0 here
        share = f", the twin gaining {c['gain_control']:+.2f} (not resolved above 0)"
    text = f"{c['mean']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}]{share} at {rate(c)}: **{c['verdict']}**"
    if c["reading"]:
        text += f"; {c['reading']}"
    text += "" if c["resolved"] else " (not resolved)"
    o = c.get("oracle")
    if o and o.get("share"):
        s = o["share"]
        text += f"; {fmt.percent(s)} of the oracle's gain"
    elif o and "oracle_lo" in o:
        text += (
            f"; the oracle's gain {o['oracle_effect']:+.2f} [{o['oracle_lo']:+.2f}, {o['oracle_hi']:+.2f}]: no share"
        )
    return text


def _end_text(e: dict[str, Any] | None) -> str:
    if e is None:
        return "not run yet"
    interval = f"{100 * e['diff']:+.1f} [{100 * e['lo']:+.1f}, {100 * e['hi']:+.1f}]"
    return f"{interval}, {e['seeds']} seeds: **{e['verdict']}**"


def markdown(data: dict[str, Any]) -> str:
    """The table as a page: methods by rows, per update at each size, end to end at the first size."""
    sizes = data["sizes"]
    end = data["end_to_end"]
    header = ["method", *[f"per update, {s}" for s in sizes]] + ([f"end to end, {sizes[0]}"] if end else [])
    body = []
    for r in data["rows"]:
        name = f"`{r['label']}`" + (f" ({r['method']})" if r["label"] != r["method"] else "")
        cells = [_update_text(r["per_update"][s], r.get("kept", {}).get(s, 0)) for s in sizes]
        body.append([name, *cells] + ([_end_text(r["end_to_end"])] if end else []))
    cells = data["cells"]
    lines = [
        f"# The credit table: each credit method against its credit-off twin on `{data['task']}`",
        "",
        "Per update: the method's gain in J after one update minus its twin's, from the same weights, optimizer "
        "state and batch (points of J [interval over reference trajectories]), at the pair's tuned rate where "
        "the probe has one or the rate tuned for both arms after it is one of its common rates, else its lowest "
        "common rate, and at a size with its own rates (its reference trajectories trained at the size's rate) "
        "at the size's rate; then the verdicts across the probe's rates, by rule (the interval is the repeated one, "
        "simultaneous at alpha / m, so it can reach 0 where a test at Holm's recycled level decided). "
        + (
            "End to end: the paired difference in final pass@1 (points [repeated interval valid at the sequential "
            "stop]) over seeds in rounds. "
            if end
            else ""
        )
        + "A cell is resolved where it has a verdict or its interval is within ±10% of the twin's gain (±0.3 "
        "points where the twin gains less than 3); where the twin's own gain is not resolved above 0 the cell "
        "gives that gain instead of the share of it (an update that does not move J: no regime to compare in). "
        "Where a probe has the twin's oracle (its credit moved onto the "
        "Monte-Carlo step advantages), the cell ends with the method's share of the oracle's gain over the twin, "
        "both measured on that probe's batches (the row's own probe, else the table's ceiling probe) [Fieller's "
        "interval, Bonferroni over the probe's shares], or the oracle's gain where it is not resolved above 0.",
        "",
        *md_table(header, body),
        "",
        f"Measured {cells['measured']} of {cells['total']} per-update cells, {cells['resolved']} resolved"
        + (f"; {data['decided']} of {len(data['rows'])} end-to-end comparisons decided." if end else "."),
    ]
    lines += _cost_text(data.get("cost"), end)
    for q in data.get("quality") or []:
        lines += oracle.across_text(q)
    notes = [f"- `{r['label']}`: {r['why']}" for r in data["rows"] if r["why"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _cost_text(c: dict[str, float] | None, end: bool) -> list[str]:
    if not c:
        return []
    h = lambda x: f"{x / 3600:.1f} h"  # noqa: E731
    text = f"What these records cost (each report's own times): the probes {h(c['probes_wall_s'])} of wall time"
    if end:
        text += (
            f", the tuning {h(c['tuning_wall_s'])} of wall time and the rounds {h(c['rounds_run_s'])} of run time "
            "(the sum of their runs' seconds, which a sweep's workers share)"
        )
    return ["", text + "."]
