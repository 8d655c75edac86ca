"""The paper files: what a seed paper states, ``results/papers/<name>.yaml``, loaded and checked
(bench/report/papers/__init__.py puts its numbers beside the measured ones).

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
  "more than 3 points"; ``*_status`` fields qualify the method/model/benchmark/metric attribution,
  and ``value_status`` a number read from a secondary source (second-hand) rather than the paper;
  ``label`` names one of several configurations of a method (its sweep label);
- ``sweep``: the file name of the sweep spec beside it;
- ``analogue`` (optional): the file name of a sweep spec beside it that runs the same
  configurations (``label``) at a scale this suite can run anywhere; the table sets its measured
  values beside the paper's, whatever its model and task (bench/report/papers/analogue.py).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError, did_you_mean

PAPERS_DIR = Path(__file__).resolve().parents[3] / "results" / "papers"
"""Where the shipped paper YAMLs live (results/papers of the repository)."""

SWEEP_SUFFIX = ".sweep.yaml"
STATUSES = {"verified": "V", "second-hand": "S", "reconstructed": "R", "unknown": "?"}
"""Status of a value -> its mark in the research notes (methods.md section 0)."""
SETTING_KEYS = {
    "models": "models",
    "training_data": "data",
    "benchmarks": "benchmarks",
    "k": "k",
    "n": "n",
    "max_new_tokens_train": "train tokens",
    "max_new_tokens_eval": "eval tokens",
    "group_size": "G",
    "lr": "lr",
    "clip": "clip",
    "kl": "KL",
    "lora": "LoRA",
}
"""Setting items every paper file must state (value null when unknown) -> their header label."""
KINDS = ("absolute", "delta")
UNITS = {"percent": 100.0, "fraction": 1.0}
"""Unit of a paper value -> the factor a measured fraction is multiplied by."""
RELATIONS = ("=", ">", ">=", "<", "<=", "~")
AVERAGE = "average"
METRIC_PATTERN = re.compile(r"(pass_at|avg_at)_[1-9][0-9]*")
OTHER_METRICS = (
    "auc_samples",
    "auc_tokens",
    "samples_to_target",
    "tokens_to_target",
    "tokens_per_correct",
    "mean_length",
    "base_pass_at_1",
    "greedy",
    "train_reward",
    "credit_gini",
    "credit_effective_token_ratio",
    "weight_gini",
    "weight_effective_n_ratio",
)
RESULT_FIELDS = {
    "method",
    "model",
    "benchmark",
    "metric",
    "value",
    "unit",
    "source",
    "kind",
    "vs",
    "over",
    "relation",
    "label",
    "note",
    "method_status",
    "model_status",
    "benchmark_status",
    "over_status",
    "metric_status",
    "value_status",
}


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
    analogue: str | None = None
    """A sweep spec beside the paper file that runs its configurations at another scale."""


# ----------------------------------------------------------------------------------- loading


def paper_names(papers_dir: Path | str | None = None) -> list[str]:
    """The papers with a YAML file in ``papers_dir`` (default: the shipped results/papers)."""
    d = Path(papers_dir) if papers_dir is not None else PAPERS_DIR
    return sorted(p.name[: -len(".yaml")] for p in d.glob("*.yaml") if not p.name.endswith(SWEEP_SUFFIX))


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
        raise _fail(
            path,
            f"{where}.metric",
            f"{raw['metric']!r} is not a metric name (pass_at_K, avg_at_N or {', '.join(OTHER_METRICS)})",
        )
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
    statuses = {k[: -len("_status")]: _status(path, f"{where}.{k}", v) for k, v in raw.items() if k.endswith("_status")}
    return PaperResult(
        method=_method(path, f"{where}.method", raw["method"]),
        model=_text(path, f"{where}.model", raw["model"]),
        benchmark=benchmark,
        metric=raw["metric"],
        value=float(value),
        unit=raw["unit"],
        source=_text(path, f"{where}.source", raw["source"]),
        kind=kind,
        vs=vs,
        over=over,
        relation=relation,
        label=_text(path, f"{where}.label", raw["label"]) if "label" in raw else None,
        statuses=statuses,
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
    sweep = _sweep_file(path, "sweep", raw["sweep"])
    analogue = _sweep_file(path, "analogue", raw["analogue"]) if raw.get("analogue") is not None else None
    return Paper(
        name=name,
        title=_text(path, "paper.title", head.get("title")),
        arxiv=arxiv,
        methods_md=_text(path, "paper.methods_md", head.get("methods_md")),
        methods=tuple(_method(path, f"paper.methods[{i}]", m) for i, m in enumerate(methods)),
        setting=setting,
        results=results,
        results_note=note,
        claims=tuple(claims),
        sweep=sweep,
        path=path,
        analogue=analogue,
    )


def _sweep_file(path: Path, where: str, value: Any) -> str:
    name = _text(path, where, value)
    if not name.endswith(SWEEP_SUFFIX) or not (path.parent / name).is_file():
        raise _fail(path, where, f"{name!r} must name a *{SWEEP_SUFFIX} file beside the paper file")
    return name


def sweep_name(paper: Paper, spec_file: str | None = None) -> str:
    """The ``name`` of the paper's own sweep spec, or of ``spec_file`` beside it (its results live
    in results/<name>/)."""
    spec_path = paper.path.parent / (spec_file or paper.sweep)
    try:
        spec = yaml.safe_load(spec_path.read_text())
    except yaml.YAMLError as e:
        raise CreditBenchError(f"{spec_path}: malformed YAML: {' '.join(str(e).split())}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise CreditBenchError(f"{spec_path}: the sweep spec has no name")
    return spec["name"]


def load_report(results_dir: Path | str, sweep: str) -> dict | None:
    """``results/<sweep>/report.json``, or None when that sweep has not been run."""
    from bench.sweep.sweep import report_path

    path = report_path(results_dir, sweep)
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CreditBenchError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("rows"), list):
        raise CreditBenchError(f"{path}: not a sweep report (no 'rows' list)")
    return report


def credit_table_cells(results_dir: Any) -> dict[str, dict]:
    """The credit table's per-update cells by label (results/credit/table.json), {} without one."""
    import json
    from pathlib import Path

    path = Path(results_dir) / "credit" / "table.json"
    rows = json.loads(path.read_text())["rows"] if path.is_file() else []
    return {r["label"]: r["per_update"] for r in rows}


def sweep_probes(results_dir: Any, sweep: str) -> dict[str, dict]:
    """The sweep's credit probes by size: its own folder (the sweep's size), then one per other tiny size
    (``creditbench judge --sizes``: probes/<sweep>-<size>)."""
    import json
    from pathlib import Path

    from bench.models.policy import TINY_SIZES

    root = Path(results_dir) / "probes"
    found = {}
    for name, folder in [("", root / sweep), *((s, root / f"{sweep}-{s}") for s in TINY_SIZES)]:
        path = folder / "report.json"
        if path.is_file():
            rep = json.loads(path.read_text())
            found[name or rep.get("model", "")] = rep
    return found
