"""A sweep's comparisons as tables for a paper, and an overlay of chosen labels' learning curves.

    creditbench table --sweep NAME [--format md|csv|tex|all] [--out DIR]   results/NAME/comparisons.{md,csv,tex}
    creditbench curves --sweep NAME --labels A B --task TASK [--model M] [--out FILE]

The table is the report's comparisons on its primary metric (report.json's ``analysis``,
bench.report.comparisons): one row per label against its control, with the label's mean and 95%
interval over seeds, the difference to the control with its interval, the raw and Holm-adjusted
p-values and the verdict; a report with a credit family (each credit method against its credit
controls) lists it first, with a family column. The CSV keeps report.json's numbers unrounded;
Markdown and LaTeX (booktabs) round them to three decimals.

The overlay draws, for one training task and model, each label's eval pass@1 on that task against
training samples from the runs' histories: the mean over seeds on the first seed's eval points (the
report's curves, bench.report.summary) with the 95% interval band where a label has 3 or more seeds.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError, did_you_mean, suggestion
from bench.report.papers.data import load_report
from bench.report.plots.common import STYLE, LineStyle, mpl, save
from bench.report.plots.curves import _human
from bench.report.summary import _curves, _mean_curve, load_runs
from bench.run.result import RunResult
from bench.stats import format as fmt

COLUMNS = ("family", "label", "task", "model", "control", "metric", "mean", "mean_lo", "mean_hi")
COLUMNS += ("diff", "diff_lo", "diff_hi", "interval", "p", "p_holm", "verdict")
"""The CSV's columns, one per value of a comparison row."""
FORMATS = ("md", "csv", "tex")


def read_report(results_dir: str | Path, sweep: str) -> dict[str, Any]:
    """results/<sweep>/report.json; an unknown sweep names the sweeps that have a report."""
    report = load_report(results_dir, sweep)
    if report is None:
        have = sorted(p.parent.name for p in Path(results_dir).glob("*/report.json"))
        raise CreditBenchError(
            f"no report.json for sweep {sweep!r} in {results_dir}/.{suggestion(sweep, have)} "
            f"Sweeps with a report: {', '.join(have) or '(none)'}."
        )
    return report


def comparison_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per comparison (columns: COLUMNS), family by family in the report's order: the
    credit family (each credit method against its credit controls, report.json's ``analysis.credit``)
    where there is one, then the recipes' (each label against the baseline or its control,
    ``analysis.assessment``); p_Holm is adjusted within a family. The task and model come from the
    comparison's ``"task (model)"``. A credit family decided in rounds gives each pair its decision's
    difference, repeated confidence interval (valid after the sequential stop) and verdict
    (``analysis.credit.repeated``), as the report's own table does; ``interval`` names the interval."""
    a = report.get("analysis") or {}
    credit = a.get("credit") or {}
    families = [("credit", credit.get("assessment")), ("recipe", a.get("assessment"))]
    out = [row for family, fa in families if fa and fa.get("rows") for row in _family_rows(family, fa)]
    _with_repeated(out, credit.get("repeated"))
    if not out:
        raise CreditBenchError(f"the report of sweep {report.get('sweep')!r} has no comparisons (one label only?)")
    return out


def _family_rows(family: str, a: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat rows of one assessment (bench.report.inference.Assessment.to_dict)."""
    rows = iter(a["rows"])  # in the comparisons' order, each comparison's labels in turn
    out = []
    for c in a["comparisons"]:
        where = re.fullmatch(r"(.*?) \((.*)\)", c["task"])  # "task (model)", bench.report.comparisons.analyse
        task, model = where.groups() if where else (c["task"], "")
        for r in (next(rows) for _ in c["diffs"]):
            m, d = r["mean"], r["diff"]
            out.append(
                {"family": family, "label": r["label"], "task": task, "model": model, "control": c["baseline"]}
                | {"metric": r["metric"], "mean": m["value"], "mean_lo": m["lo"], "mean_hi": m["hi"]}
                | {"diff": d["value"], "diff_lo": d["lo"], "diff_hi": d["hi"], "p": d["p"], "p_holm": r["p_holm"]}
                | {"verdict": r["verdict"], "interval": "95% CI"}
            )
    return out


def _with_repeated(rows: list[dict[str, Any]], repeated: dict[str, Any] | None) -> None:
    """The credit rows' differences, intervals and verdicts replaced by their sequential decisions'."""
    if not repeated:
        return
    by = {(r["method"], r["control"], r["task"]): r for r in repeated["rows"]}
    for row in (x for x in rows if x["family"] == "credit"):
        r = by.get((row["label"], row["control"], f"{row['task']} ({row['model']})"))
        if r is not None and r["value"] is not None:
            row |= {"diff": r["value"], "diff_lo": r["lo"], "diff_hi": r["hi"], "verdict": r["verdict"],
                    "interval": repeated["label"]}  # fmt: skip


def _ci(row: dict[str, Any], key: str, signed: bool = False) -> str:
    return fmt.interval(row[key], row[f"{key}_lo"], row[f"{key}_hi"], "+.3f" if signed else ".3f")


HEADER = ("label", "task", "model", "control", "mean [95% CI]", "diff to control [95% CI]", "p", "p_Holm", "verdict")


def _table(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """HEADER and each row's cells as text; a leading family column where the rows hold two families, and
    the name of each difference's interval where they are not all 95% CIs (a family decided in rounds)."""
    names = [[str(r[k]) for k in ("label", "task", "model", "control")] for r in rows]
    cells = [
        [*n, _ci(r, "mean"), _ci(r, "diff", signed=True), fmt.p_value(r["p"]), fmt.p_value(r["p_holm"]), r["verdict"]]
        for n, r in zip(names, rows)
    ]
    head = list(HEADER)
    if {r["interval"] for r in rows} != {"95% CI"}:
        head[5] = "diff to control [interval]"
        head.insert(6, "interval")
        cells = [[*c[:6], r["interval"], *c[6:]] for r, c in zip(rows, cells)]
    if len({r["family"] for r in rows}) > 1:
        return ["family", *head], [[r["family"], *c] for r, c in zip(rows, cells)]
    return head, cells


def to_markdown(rows: Sequence[dict[str, Any]]) -> str:
    head, cells = _table(rows)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(out) + "\n"


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """COLUMNS with report.json's numbers unrounded (an empty cell where the report has none)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if r[k] is None else r[k]) for k in COLUMNS} for r in rows)
    return buf.getvalue()


LATEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"} | {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
LATEX_SPECIAL |= {"\\": r"\textbackslash{}", "±": r"$\pm$", "–": "--", "<": r"$<$"}
LATEX_HEADER = {
    "mean [95% CI]": r"mean [95\% CI]",
    "diff to control [95% CI]": r"$\Delta$ to control [95\% CI]",
    "p": "$p$",
    "p_Holm": r"$p_{\mathrm{Holm}}$",
}


def latex_escape(text: str) -> str:
    """Text as LaTeX prints it: its special characters escaped (``_`` -> ``\\_``, ``±`` -> ``$\\pm$``)."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(rows: Sequence[dict[str, Any]]) -> str:
    """A booktabs tabular, one line per comparison, a rule between (family, task, model) groups."""
    head, cells = _table(rows)
    spec = "l" * (len(head) - 3) + "rrl"  # p and p_Holm right-aligned
    out = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(LATEX_HEADER.get(h, h) for h in head) + r" \\"]
    out.append(r"\midrule")
    group = None
    for r, c in zip(rows, cells):
        if group is not None and (r["family"], r["task"], r["model"]) != group:
            out.append(r"\midrule")
        group = (r["family"], r["task"], r["model"])
        out.append(" & ".join(latex_escape(x) for x in c) + r" \\")
    return "\n".join([*out, r"\bottomrule", r"\end{tabular}"]) + "\n"


RENDER = {"md": to_markdown, "csv": to_csv, "tex": to_latex}


def write_tables(
    results_dir: str | Path, sweep: str, fmt: str = "all", out: str | Path | None = None
) -> tuple[str, list[Path]]:
    """Write the sweep's comparisons as comparisons.{md,csv,tex} (``fmt``: one of FORMATS or "all")
    into ``out`` (default results/<sweep>/); returns (the Markdown table, the files written)."""
    if fmt not in (*FORMATS, "all"):
        raise CreditBenchError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}, all")
    rows = comparison_rows(read_report(results_dir, sweep))
    folder = Path(out) if out is not None else Path(results_dir) / sweep
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for f in FORMATS if fmt == "all" else (fmt,):
        path = folder / f"comparisons.{f}"
        path.write_text(RENDER[f](rows))
        written.append(path)
    return to_markdown(rows), written


# ---------------------------------------------------------------------------- the overlay


def _pick(
    runs: list[RunResult], labels: Sequence[str], task: str, model: str | None
) -> tuple[str, dict[str, list[RunResult]]]:
    """The model and, per label, its runs trained on ``task`` with it; errors name the valid choices."""
    have = sorted({r.label for r in runs})
    for lab in labels:
        if lab not in have:
            raise did_you_mean("label", lab, have)
    if len(set(labels)) < 2:
        raise CreditBenchError(f"give two or more different labels to overlay; the sweep's labels: {', '.join(have)}")
    tasks = sorted({r.task for r in runs})
    if task not in tasks:
        raise did_you_mean("task", task, tasks)
    models = sorted({r.model for r in runs if r.task == task})
    if model is None and len(models) > 1:
        raise CreditBenchError(f"the sweep trains several models on {task}: give --model, one of {', '.join(models)}")
    model = models[0] if model is None else model
    if model not in models:
        raise did_you_mean("model", model, models)
    groups = {lab: _runs_of(runs, lab, task, model) for lab in labels}
    missing = [lab for lab, rs in groups.items() if not rs]
    if missing:
        ran = sorted({r.label for r in runs if (r.task, r.model) == (task, model)})
        raise CreditBenchError(
            f"label {missing[0]!r} has no runs on {task} with {model}; labels that do: {', '.join(ran)}"
        )
    return model, groups


def _runs_of(runs: list[RunResult], label: str, task: str, model: str) -> list[RunResult]:
    """A label's runs trained on ``task`` with ``model``, by seed."""
    return sorted((r for r in runs if (r.label, r.task, r.model) == (label, task, model)), key=lambda r: r.seed)


def curves(
    results_dir: str | Path,
    sweep: str,
    labels: Sequence[str],
    task: str,
    model: str | None = None,
    out: str | Path | None = None,
) -> Path:
    """Overlay the labels' mean eval pass@1 on ``task`` against training samples (runs trained on
    ``task`` with ``model``, which may be left out when the sweep has one), each with its 95% band
    where it has 3 or more seeds; a PNG at ``out`` (default results/<sweep>/curves_<task>_<labels>.png)."""
    report = read_report(results_dir, sweep)
    model, groups = _pick(load_runs(str(results_dir), sweep), labels, task, model)
    path = Path(out) if out is not None else Path(results_dir) / sweep / _file_name(task, labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    st = LineStyle(report)
    _, plt = mpl()
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
        for lab, rs in groups.items():
            c = _mean_curve([_curves(r, task) for r in rs])
            kw = st.kw({"method": lab, "task": task}) | {"linestyle": "-"}
            ax.plot(c["samples"], c["pass_at_1"], label=f"{lab} ({len(rs)} seeds)", marker="o", markersize=2.5, **kw)
            band = [
                (x, lo, hi) for x, lo, hi in zip(c["samples"], c["pass_at_1_lo"], c["pass_at_1_hi"]) if lo is not None
            ]
            if len(band) > 1:  # the interval needs 3 seeds (bench.report.comparisons.interval)
                bx, blo, bhi = zip(*band)
                ax.fill_between(bx, blo, bhi, color=kw["color"], alpha=0.15, linewidth=0, zorder=kw["zorder"] - 2)
        ax.set_xlabel("training samples (completions)")
        ax.set_ylabel(f"eval pass@1 on {task}")
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: _human(v)))
        ax.set_xlim(left=0)
        title = f"{sweep}: {model} trained on {task}\nmean over seeds, band: 95% interval (3 or more seeds)"
        ax.set_title(title, parse_math=False)
        for t in ax.legend(frameon=False).get_texts():
            t.set_parse_math(False)
        return save(fig, plt, path)


def _file_name(task: str, labels: Sequence[str]) -> str:
    return re.sub(r"[^\w.-]+", "_", f"curves_{task}_{'-'.join(labels)}") + ".png"
