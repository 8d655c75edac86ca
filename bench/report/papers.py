"""Paper tables: a seed paper's own numbers beside what this suite measured in its setting.

Each paper has ``results/papers/<name>.yaml`` (what the paper states, with the research notes'
status of every value) and ``results/papers/<name>.sweep.yaml`` (a sweep spec that re-runs its
setting). ``creditbench table --paper NAME`` prints one Markdown row per paper result::

    creditbench table --paper selective_traces                 # the paper's own sweep
    creditbench table --paper grpo_lambda --sweep my-rerun --sweep paper-grpo_lambda
    python -m bench.report.papers --paper arca

A paper YAML has four parts:

- ``paper``: title, arxiv id, the research notes' section (``methods_md``) and the registered
  methods that implement it;
- ``setting``: one ``{value, status, note}`` per item (models, training data, benchmarks, k, n,
  generation lengths, G, lr, clip, KL, LoRA, ...), status one of verified / second-hand /
  reconstructed / unknown;
- ``results``: only numbers the notes mark verified. Each entry names a registered ``method``, a
  ``model`` (matched against a sweep's model by its last path component too), a ``benchmark`` (a
  task name, or ``average`` with the task list ``over``), a ``metric`` (``pass_at_K``,
  ``avg_at_N``, ...), a numeric ``value`` in ``unit`` percent or fraction, a ``source``; a gain over a
  baseline is ``kind: delta`` with ``vs: <method>``; ``relation`` (default ``=``) marks bounds such as
  "more than 3 points"; ``*_status`` fields qualify the method/model/benchmark/metric attribution;
- ``sweep``: the file name of the sweep spec beside it.

Measured values come from ``results/<sweep>/report.json`` (bench/report/summary.py): the mean and 95%
t-interval over seeds of the row with the same method, model and eval task. For a delta, the
row's ``vs_baseline`` when the sweep's baseline is the entry's ``vs``, else the paired per-seed
difference of the two rows; an average over benchmarks is taken per seed first. A dash means not
run or not found.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError, did_you_mean

PAPERS_DIR = Path(__file__).resolve().parents[1] / "results" / "papers"
"""Where the shipped paper YAMLs live (results/papers of the repository)."""

SWEEP_SUFFIX = ".sweep.yaml"
STATUSES = {"verified": "V", "second-hand": "S", "reconstructed": "R", "unknown": "?"}
"""Status of a value -> its mark in the research notes (methods.md section 0)."""
SETTING_KEYS = {
    "models": "models", "training_data": "data", "benchmarks": "benchmarks", "k": "k", "n": "n",
    "max_new_tokens_train": "train tokens", "max_new_tokens_eval": "eval tokens", "group_size": "G",
    "lr": "lr", "clip": "clip", "kl": "KL", "lora": "LoRA",
}
"""Setting items every paper file must state (value null when unknown) -> their header label."""
KINDS = ("absolute", "delta")
UNITS = {"percent": 100.0, "fraction": 1.0}
"""Unit of a paper value -> the factor a measured fraction is multiplied by."""
RELATIONS = ("=", ">", ">=", "<", "<=", "~")
AVERAGE = "average"
METRIC_PATTERN = re.compile(r"(pass_at|avg_at)_[1-9][0-9]*")
OTHER_METRICS = ("auc_samples", "auc_tokens", "samples_to_target", "tokens_to_target",
                 "tokens_per_correct", "mean_length", "base_pass_at_1")
RESULT_FIELDS = {"method", "model", "benchmark", "metric", "value", "unit", "source", "kind", "vs", "over",
                 "relation", "label", "note", "method_status", "model_status", "benchmark_status",
                 "over_status", "metric_status"}


@dataclass(frozen=True)
class Setting:
    """One setting item of a paper: its value as the research notes give it, and their status."""

    value: Any
    status: str
    note: str = ""


@dataclass(frozen=True)
class PaperResult:
    """One number the paper reports (verified in the research notes)."""

    method: str
    model: str
    benchmark: str
    metric: str
    value: float
    unit: str
    source: str
    kind: str = "absolute"
    vs: str | None = None
    over: tuple[str, ...] = ()
    relation: str = "="
    label: str | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    """``{"model": "second-hand", ...}`` for attributions weaker than verified."""

    @property
    def eval_tasks(self) -> tuple[str, ...]:
        """The eval tasks the measured value needs (the ``over`` list for an average)."""
        return self.over if self.benchmark == AVERAGE else (self.benchmark,)


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    arxiv: str
    methods_md: str
    methods: tuple[str, ...]
    setting: dict[str, Setting]
    results: tuple[PaperResult, ...]
    results_note: str
    claims: tuple[str, ...]
    sweep: str
    path: Path


@dataclass(frozen=True)
class Measured:
    """A measured value (a fraction, as in report.json) with its 95% interval over seeds."""

    mean: float
    lo: float | None
    hi: float | None
    n: int
    sweep: str


# ----------------------------------------------------------------------------------- loading


def paper_names(papers_dir: Path | str | None = None) -> list[str]:
    """The papers with a YAML file in ``papers_dir`` (default: the shipped results/papers)."""
    d = Path(papers_dir) if papers_dir is not None else PAPERS_DIR
    return sorted(p.name[:-len(".yaml")] for p in d.glob("*.yaml") if not p.name.endswith(SWEEP_SUFFIX))


def load_paper(name: str, papers_dir: Path | str | None = None) -> Paper:
    """Load and validate ``<papers_dir>/<name>.yaml``; a one-line CreditBenchError names the valid
    papers for an unknown name, or the file and field that is wrong."""
    d = Path(papers_dir) if papers_dir is not None else PAPERS_DIR
    names = paper_names(d)
    if name not in names:
        raise did_you_mean("paper", name, names)
    path = d / f"{name}.yaml"
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise CreditBenchError(f"{path}: malformed YAML: {' '.join(str(e).split())}") from None
    return validate(name, raw, path)


def _fail(path: Path, where: str, msg: str) -> CreditBenchError:
    return CreditBenchError(f"{path.name}: {where}: {msg}")


def _text(path: Path, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, where, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _method(path: Path, where: str, name: Any) -> str:
    from bench.registry import METHODS

    name = _text(path, where, name)
    if name not in METHODS:
        raise _fail(path, where, str(did_you_mean("method", name, METHODS.names())))
    return name


def _task(path: Path, where: str, name: Any) -> str:
    from bench.registry import TASKS

    name = _text(path, where, name)
    if name not in TASKS:
        raise _fail(path, where, str(did_you_mean("task", name, TASKS.names())))
    return name


def _status(path: Path, where: str, status: Any) -> str:
    if status not in STATUSES:
        raise _fail(path, where, f"status {status!r} is not one of {', '.join(STATUSES)}")
    return status


def is_metric(name: Any) -> bool:
    """A metric name of report.json: pass_at_K, avg_at_N or one of OTHER_METRICS."""
    return isinstance(name, str) and (METRIC_PATTERN.fullmatch(name) is not None or name in OTHER_METRICS)


def _result(path: Path, i: int, raw: Any) -> PaperResult:
    where = f"results[{i}]"
    if not isinstance(raw, dict):
        raise _fail(path, where, f"must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - RESULT_FIELDS)
    if unknown:
        raise _fail(path, where, f"unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(RESULT_FIELDS))}")
    for key in ("method", "model", "benchmark", "metric", "value", "unit", "source"):
        if key not in raw:
            raise _fail(path, where, f"missing field {key!r}")
    value = raw["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, f"{where}.value", f"must be a finite number, got {value!r}")
    if not is_metric(raw["metric"]):
        raise _fail(path, f"{where}.metric", f"{raw['metric']!r} is not a metric name "
                    f"(pass_at_K, avg_at_N or {', '.join(OTHER_METRICS)})")
    if raw["unit"] not in UNITS:
        raise _fail(path, f"{where}.unit", f"{raw['unit']!r} is not one of {', '.join(UNITS)}")
    kind = raw.get("kind", "absolute")
    if kind not in KINDS:
        raise _fail(path, f"{where}.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if kind == "delta" and "vs" not in raw:
        raise _fail(path, f"{where}.vs", "a delta needs the method it is measured against (vs: <method>)")
    vs = _method(path, f"{where}.vs", raw["vs"]) if "vs" in raw else None
    relation = raw.get("relation", "=")
    if relation not in RELATIONS:
        raise _fail(path, f"{where}.relation", f"{relation!r} is not one of {', '.join(RELATIONS)}")
    benchmark = _text(path, f"{where}.benchmark", raw["benchmark"])
    over: tuple[str, ...] = ()
    if benchmark == AVERAGE:
        items = raw.get("over")
        if not isinstance(items, list) or not items:
            raise _fail(path, f"{where}.over", "an average needs the list of tasks it is taken over")
        over = tuple(_task(path, f"{where}.over[{j}]", t) for j, t in enumerate(items))
    elif "over" in raw:
        raise _fail(path, f"{where}.over", f"only an {AVERAGE!r} benchmark has an 'over' list")
    statuses = {k[:-len("_status")]: _status(path, f"{where}.{k}", v) for k, v in raw.items() if k.endswith("_status")}
    return PaperResult(
        method=_method(path, f"{where}.method", raw["method"]), model=_text(path, f"{where}.model", raw["model"]),
        benchmark=benchmark, metric=raw["metric"], value=float(value), unit=raw["unit"],
        source=_text(path, f"{where}.source", raw["source"]), kind=kind, vs=vs, over=over, relation=relation,
        label=_text(path, f"{where}.label", raw["label"]) if "label" in raw else None, statuses=statuses,
    )


def validate(name: str, raw: Any, path: Path) -> Paper:
    """Check a parsed paper YAML and build its :class:`Paper` (errors name the bad field)."""
    if not isinstance(raw, dict):
        raise CreditBenchError(f"{path.name}: must be a mapping with paper, setting, results and sweep")
    for key in ("paper", "setting", "results", "sweep"):
        if key not in raw:
            raise _fail(path, key, "missing section")
    head = raw["paper"]
    if not isinstance(head, dict):
        raise _fail(path, "paper", "must be a mapping with title, arxiv, methods_md and methods")
    methods = head.get("methods")
    if not isinstance(methods, list) or not methods:
        raise _fail(path, "paper.methods", "must list the registered methods the paper introduces")
    arxiv = str(head.get("arxiv", ""))
    if not re.fullmatch(r"[0-9]{4}\.[0-9]{4,5}", arxiv):
        raise _fail(path, "paper.arxiv", f"must be an arXiv id such as 2605.05965 (quoted), got {head.get('arxiv')!r}")

    setting_raw = raw["setting"]
    if not isinstance(setting_raw, dict):
        raise _fail(path, "setting", "must be a mapping of item -> {value, status, note}")
    missing = [k for k in SETTING_KEYS if k not in setting_raw]
    if missing:
        raise _fail(path, "setting", f"missing item(s) {', '.join(missing)} (state them, value null when unknown)")
    setting: dict[str, Setting] = {}
    for key, item in setting_raw.items():
        where = f"setting.{key}"
        if not isinstance(item, dict) or "value" not in item or "status" not in item:
            raise _fail(path, where, "must be a mapping with value and status (and an optional note)")
        extra = sorted(set(item) - {"value", "status", "note"})
        if extra:
            raise _fail(path, where, f"unknown field(s) {', '.join(extra)}; valid: value, status, note")
        status = _status(path, f"{where}.status", item["status"])
        if (item["value"] is None) != (status == "unknown"):
            raise _fail(path, where, "value must be null exactly when the status is unknown")
        setting[key] = Setting(item["value"], status, str(item.get("note") or "").strip())

    results_raw = raw["results"]
    if not isinstance(results_raw, list):
        raise _fail(path, "results", "must be a list (empty, with a results_note, when nothing is verified)")
    results = tuple(_result(path, i, r) for i, r in enumerate(results_raw))
    note = str(raw.get("results_note") or "").strip()
    if not results and not note:
        raise _fail(path, "results_note", "an empty results list needs a note saying why")
    claims = raw.get("claims") or []
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise _fail(path, "claims", "must be a list of strings")
    sweep = _text(path, "sweep", raw["sweep"])
    if not sweep.endswith(SWEEP_SUFFIX) or not (path.parent / sweep).is_file():
        raise _fail(path, "sweep", f"{sweep!r} must name a *{SWEEP_SUFFIX} file beside the paper file")
    return Paper(
        name=name, title=_text(path, "paper.title", head.get("title")), arxiv=arxiv,
        methods_md=_text(path, "paper.methods_md", head.get("methods_md")),
        methods=tuple(_method(path, f"paper.methods[{i}]", m) for i, m in enumerate(methods)),
        setting=setting, results=results, results_note=note, claims=tuple(claims), sweep=sweep, path=path,
    )


def sweep_name(paper: Paper) -> str:
    """The ``name`` of the paper's own sweep spec (its results live in results/<name>/)."""
    spec_path = paper.path.parent / paper.sweep
    try:
        spec = yaml.safe_load(spec_path.read_text())
    except yaml.YAMLError as e:
        raise CreditBenchError(f"{spec_path}: malformed YAML: {' '.join(str(e).split())}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise CreditBenchError(f"{spec_path}: the sweep spec has no name")
    return spec["name"]


def load_report(results_dir: Path | str, sweep: str) -> dict | None:
    """``results/<sweep>/report.json``, or None when that sweep has not been run."""
    path = Path(results_dir) / sweep / "report.json"
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CreditBenchError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise CreditBenchError(f"{path}: not a sweep report (no 'rows' list)")
    return report


# ------------------------------------------------------------------------------- measuring


def same_model(measured: Any, paper_model: str) -> bool:
    """``Qwen/Qwen3-1.7B`` (a sweep's model) matches ``Qwen3-1.7B`` (the paper's name): equal as
    given or by the last path component, ignoring case."""
    if not isinstance(measured, str):
        return False
    a, b = measured.strip().rstrip("/").lower(), paper_model.strip().rstrip("/").lower()
    return a == b or a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1]


def interval(values: list[float]) -> tuple[float, float | None, float | None]:
    """Mean and 95% t-interval of per-seed values, as report.json computes them (bench.report.stats);
    no interval from a single value."""
    from bench.report.stats import t_interval

    ci = t_interval(values)
    return (ci["mean"], ci["lo"], ci["hi"]) if len(values) > 1 else (ci["mean"], None, None)


def _groups(report: dict, method: str, model: str, label: str | None) -> list[tuple[str, str, dict[str, dict]]]:
    """Rows of one method and model grouped by (label, training task) -> {eval task: row}; the
    group labelled as the method itself comes first, then report order."""
    groups: dict[tuple[str, str], dict[str, dict]] = {}
    for row in report.get("rows", []):
        if not isinstance(row, dict) or row.get("method_name") != method or not same_model(row.get("model"), model):
            continue
        if label is not None and row.get("method") != label:
            continue
        groups.setdefault((row.get("method"), row.get("task")), {}).setdefault(row.get("eval_task"), row)
    ordered = sorted(groups.items(), key=lambda kv: kv[0][0] != method)
    return [(lab, task, rows) for (lab, task), rows in ordered]


def _per_seed(rows: list[dict], metric: str) -> dict[Any, float] | None:
    """seed -> mean over ``rows`` (benchmarks) of the metric, for seeds every row has a value for."""
    per_row = []
    for row in rows:
        m = (row.get("metrics") or {}).get(metric)
        if not isinstance(m, dict):
            return None
        values, seeds = m.get("values"), row.get("seeds")
        if not isinstance(values, list) or not isinstance(seeds, list) or len(values) != len(seeds):
            return None
        per_row.append({s: v for s, v in zip(seeds, values) if isinstance(v, (int, float))})
    common = set.intersection(*(set(d) for d in per_row)) if per_row else set()
    return {s: sum(d[s] for d in per_row) / len(per_row) for s in common} or None


def _summary(m: Any) -> tuple[float, float | None, float | None, int] | None:
    """(mean, lo, hi, n) of a report metric entry, or None when it has no mean."""
    if not isinstance(m, dict) or not isinstance(m.get("mean"), (int, float)):
        return None
    lo, hi = m.get("lo"), m.get("hi")
    return (float(m["mean"]), lo if isinstance(lo, (int, float)) else None,
            hi if isinstance(hi, (int, float)) else None, int(m.get("n") or len(m.get("values") or []) or 1))


def _baseline_matches(report: dict, vs: str, model: str) -> bool:
    """Whether the sweep's baseline label is ``vs`` or a row labelled with it runs method ``vs``."""
    base = report.get("baseline")
    if base == vs:
        return True
    return any(isinstance(r, dict) and r.get("method") == base and r.get("method_name") == vs
               and same_model(r.get("model"), model) for r in report.get("rows", []))


def measure_in(entry: PaperResult, report: dict, sweep: str) -> Measured | None:
    """The measured counterpart of ``entry`` in one sweep report, or None when it has no such rows."""
    needed = entry.eval_tasks
    chosen = next(((lab, task, rows) for lab, task, rows in _groups(report, entry.method, entry.model, entry.label)
                   if all(t in rows for t in needed)), None)
    if chosen is None:
        return None
    _, task, rows_by_task = chosen
    rows = [rows_by_task[t] for t in needed]
    if entry.kind == "absolute":
        if len(rows) == 1:
            s = _summary((rows[0].get("metrics") or {}).get(entry.metric))
            return Measured(s[0], s[1], s[2], s[3], sweep) if s else None
        per_seed = _per_seed(rows, entry.metric)
        if per_seed is None:
            return None
        mean, lo, hi = interval(list(per_seed.values()))
        return Measured(mean, lo, hi, len(per_seed), sweep)
    assert entry.vs is not None
    if len(rows) == 1 and _baseline_matches(report, entry.vs, entry.model):
        s = _summary((rows[0].get("vs_baseline") or {}).get(entry.metric))
        if s:
            return Measured(s[0], s[1], s[2], s[3], sweep)
    base_groups = [g for g in _groups(report, entry.vs, entry.model, None) if all(t in g[2] for t in needed)]
    base_groups.sort(key=lambda g: g[1] != task)  # the same training task first
    if not base_groups:
        return None
    ours, theirs = _per_seed(rows, entry.metric), _per_seed([base_groups[0][2][t] for t in needed], entry.metric)
    if ours is None or theirs is None:
        return None
    paired = [ours[s] - theirs[s] for s in ours if s in theirs]
    if not paired:
        return None
    mean, lo, hi = interval(paired)
    return Measured(mean, lo, hi, len(paired), sweep)


def measure(entry: PaperResult, reports: list[tuple[str, dict | None]]) -> Measured | None:
    """The first sweep (in the given order) that measured ``entry``."""
    for sweep, report in reports:
        if report is not None:
            found = measure_in(entry, report, sweep)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------------------- rendering


def _mark(status: str | None) -> str:
    return f" [{STATUSES[status]}]" if status and status != "verified" else ""


def _plain(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items())
    return str(value)


def setting_line(paper: Paper) -> str:
    """One line: every required setting item with its status mark ([?] unknown)."""
    parts = []
    for key, label in SETTING_KEYS.items():
        item = paper.setting[key]
        mark = "" if item.status == "unknown" else f" [{STATUSES[item.status]}]"
        parts.append(f"{label} {_plain(item.value)}{mark}")
    return "**Setting**: " + "; ".join(parts)


def _fmt(value: float, unit: str, signed: bool) -> str:
    """A value already in the entry's unit: 2 decimals for percent, 3 for fractions."""
    digits = 2 if unit == "percent" else 3
    return f"{value:{'+' if signed else ''}.{digits}f}"


def paper_cell(entry: PaperResult) -> str:
    rel = "" if entry.relation == "=" else f"{entry.relation} "
    text = _fmt(entry.value, entry.unit, entry.kind == "delta")
    return f"{rel}{text}" + (f" vs {entry.vs}" if entry.kind == "delta" else "")


def measured_cell(entry: PaperResult, m: Measured | None) -> str:
    if m is None:
        return "-"
    scale, signed = UNITS[entry.unit], entry.kind == "delta"
    body = _fmt(m.mean * scale, entry.unit, signed)
    if m.n > 1 and m.lo is not None and m.hi is not None:
        body += f" [{_fmt(m.lo * scale, entry.unit, signed)}, {_fmt(m.hi * scale, entry.unit, signed)}]"
    return f"{body} (n={m.n})"


def benchmark_cell(entry: PaperResult) -> str:
    if entry.benchmark == AVERAGE:
        return f"average of {', '.join(entry.over)}{_mark(entry.statuses.get('over'))}"
    return entry.benchmark + _mark(entry.statuses.get("benchmark"))


def render(paper: Paper, reports: list[tuple[str, dict | None]]) -> str:
    """The Markdown table of ``paper`` against the given sweep reports (first match wins)."""
    lines = [f"## {paper.title} (arXiv {paper.arxiv})", "",
             f"Methods: {', '.join(paper.methods)}; research notes: methods.md {paper.methods_md}; "
             f"sweep spec: results/papers/{paper.sweep}.", "", setting_line(paper), ""]
    if paper.results:
        lines += ["| method | model | benchmark | metric | paper | measured | sweep | source |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in paper.results:
            m = measure(e, reports)
            lines.append(
                f"| {e.method}{_mark(e.statuses.get('method'))} | {e.model}{_mark(e.statuses.get('model'))} "
                f"| {benchmark_cell(e)} | {e.metric}{_mark(e.statuses.get('metric'))} | {paper_cell(e)} "
                f"| {measured_cell(e, m)} | {m.sweep if m else '-'} | {' '.join(e.source.split())} |")
        lines += ["", "Paper values and measured values in percent points where the unit is percent; "
                  "measured: mean [95% t-interval] over n seeds (a delta: paired per seed, or the report's "
                  "vs_baseline); [S] second-hand, [R] reconstructed attribution; - not run or not found."]
    else:
        lines.append(f"No verified numbers: {' '.join(paper.results_note.split())}")
    if paper.claims:
        lines += ["", "Claims without numbers:"] + [f"- {' '.join(c.split())}" for c in paper.claims]
    missing = [s for s, r in reports if r is None]
    if missing:
        lines += ["", "Not run yet (no report.json): " + ", ".join(missing) + "."]
    return "\n".join(lines)


def table(paper_name: str, sweeps: list[str] | None = None, results_dir: Path | str = "results",
          papers_dir: Path | str | None = None) -> str:
    """Load the paper and the sweeps' reports (default: the paper's own sweep) and render the table."""
    paper = load_paper(paper_name, papers_dir)
    names = list(sweeps) if sweeps else [sweep_name(paper)]
    return render(paper, [(s, load_report(results_dir, s)) for s in names])


def main(argv: list[str] | None = None) -> int:
    """``creditbench table --paper NAME [--sweep SWEEP ...] [--results-dir results]``."""
    from bench.run.args import ArgumentParser

    ap = ArgumentParser(
        prog="creditbench table",
        description="A seed paper's verified numbers beside this suite's measured ones (Markdown).")
    ap.add_argument("--paper", required=True, help=f"a paper file in results/papers ({', '.join(paper_names())})")
    ap.add_argument("--sweep", action="append", default=None,
                    help="a sweep whose results/<SWEEP>/report.json to read; repeat for several (first match "
                         "wins); default: the paper's own sweep spec's name")
    ap.add_argument("--results-dir", default="results", help="where the sweeps' folders are (default: results)")
    ap.add_argument("--papers-dir", default=None, help="where the paper YAMLs are (default: the shipped results/papers)")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(table(a.paper, a.sweep, a.results_dir, a.papers_dir))
    except CreditBenchError as e:
        print(f"creditbench: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
