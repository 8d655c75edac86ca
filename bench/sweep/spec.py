"""The sweep spec: the typed form of a sweep YAML (see results/sweeps/ and results/papers/*.sweep.yaml)::

    name: embedded                       # results/<name>/ and the parent MLflow run's name
    base: ../configs/embedded_grpo.yaml  # optional run YAML every run starts from (relative to the spec)
    tasks: [arithmetic]                  # training task(s): a name or {name, options}
    eval_tasks: []                       # more tasks evaluated at every eval point
    methods:                             # a name, `all` (every registered method), or
      - all                              #   {name, label, options, overrides, placebo, credit_controls}
      - {name: grpo, label: grpo-lora16, overrides: {model.lora.rank: 16}}
      - {name: grpo_lambda, credit_controls: [twin]}   # this entry's credit controls only
    credit_controls: [twin, placebo]     # each credit method's credit-off twin and placebo beside it
    method_overrides: {arca: {model.lora.rank: 16}}   # overrides for a method wherever it appears
    models: [tiny-500k, tiny-2m]         # tiny sizes, local directories or Hub ids; or {name, overrides}
    seeds: [0, 1]
    budget: {samples: 4096}              # required: training samples or generated tokens per run
    eval: {every: 8, n: 4, k: [1, 2, 4], num_problems: 100}
    overrides: {rl.lr: 1.0e-4}           # any run config field, dotted, for every run
    baseline: grpo                       # the label paired differences and the target refer to
    target: 0.9                          # cost to reach the baseline's base + 0.9 x its gain in pass@1
    target_of: gain                      # or final: 0.9 x the baseline's final pass@1
    threads: 1                           # torch threads per run (default: cores // jobs)
    analysis: {margin: 0.03, controls: {arca: grpo-lora16}, sd_train: 0.02, sd_item: 0.45}
    tune: {lr: [5.0e-5, 1.0e-4, 2.0e-4], seeds: [100, 101, 102], knobs: {entropy_top: {rho: [0.1, 0.2]}}}

A spec is parsed like a run config: jsonargparse checks every value against the dataclasses below,
whose field docstrings document the keys. Two shorthands are expanded first: a list key given a
single entry is a list of that entry, and a task, method or model given by its name is
``{name: NAME}``. Keys are checked here too, before jsonargparse, which lets a misspelt key through
when its value is an empty mapping. Every error is one line that names the file and the key.

The defaults of the report's baseline and target (``baseline``, ``target``, ``target_of``) live
here only: bench.report.summary and ``creditbench summarize`` read them from :class:`SweepSpec`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.config import TaskSpec
from bench.core import check
from bench.errors import CreditBenchError, did_you_mean
from bench.run.args import describe_type, load_yaml, locate
from bench.sweep.analysis import Analysis
from bench.sweep.entries import Control, MethodEntry, ModelEntry
from bench.sweep.schedule import Budget, SequentialSpec, Tune

TargetOf = Literal["gain", "final"]
TARGETS: tuple[str, ...] = typing.get_args(TargetOf)
"""How the to-target cost's pass@1 is set from the baseline: a share of its gain over its base
policy, or a share of its final pass@1."""
ALL = "all"
"""The method entry that stands for every registered method not listed under its own name."""


@dataclass
class SweepSpec:
    name: str
    """results/<name>/ and the parent MLflow run's name: a plain directory name."""
    methods: list[MethodEntry]
    """The methods compared: names, `all`, or {name, label, options, overrides}."""
    models: list[ModelEntry]
    """The models every method trains: names or {name, overrides}."""
    seeds: list[int]
    """One run per seed of every method, model and task."""
    budget: Budget
    """Training samples or generated tokens per run."""
    description: str | None = None
    """The parent MLflow run's note (default: "sweep <name>")."""
    experiment: str = "creditbench"
    """MLflow experiment of the sweep's runs."""
    base: str | None = None
    """A run YAML every run starts from (relative to the spec's folder)."""
    tasks: list[TaskSpec] | None = None
    """Training tasks: names or {name, options} (default: the base's task, else arithmetic)."""
    eval_tasks: list[TaskSpec] = field(default_factory=list)
    """More tasks evaluated at every eval point, after the training task."""
    method_overrides: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    """Registered method name -> dotted run config settings for its runs wherever it appears."""
    eval: dict[str, Any] = field(default_factory=dict)
    """Settings of the run config's eval section, for every run."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Dotted run config settings for every run (e.g. {rl.lr: 1.0e-4})."""
    baseline: str = "grpo"
    """The method label that paired differences and the to-target cost refer to."""
    target: float = 0.9
    """The to-target pass@1 as a share of the baseline's gain or final pass@1 (see target_of)."""
    target_of: TargetOf = "gain"
    """gain: the baseline's mean base pass@1 + target x its gain; final: target x its final pass@1."""
    threads: int = 0
    """torch threads per run (0: the machine's cores // the sweep's jobs)."""
    analysis: Analysis = field(default_factory=Analysis)
    """The comparison's statistics: primary metric, alpha, power, equivalence margin, controls and the
    variance prior of ``--dry_run``."""
    sequential: SequentialSpec | None = None
    """Run the seeds in rounds until each credit comparison (``credit_controls``) is decided: better,
    worse, or equivalent within analysis.margin, against group-sequential boundaries, Holm across the
    family; the other labels run the first round's seeds."""
    tune: Tune | None = None
    """Tune each label's rl.lr (and at most one knob per method) on tuning seeds before the sweep."""
    credit_controls: list[Control] = field(default_factory=list)
    """Add beside every method entry whose credit is not uniform its credit-off twin (``twin``: label
    <label>-twin, the method's declared twin options over the entry's) and its placebo (``placebo``:
    <label>-placebo), with the entry's overrides; each method is then compared with them first."""
    credit_probe: dict[str, Any] = field(default_factory=dict)
    """The credit probe's design for this sweep (``creditbench credit-probe``, ``judge``, ``sweep
    --credit_probe``): options of bench.paired.plan.ProbeOptions (batches, first, step, cap, lrs, ...);
    a flag on the command line overrides one."""

    def __post_init__(self) -> None:
        check(
            bool(self.name) and "/" not in self.name and not self.name.startswith("."),
            f"name must be a plain directory name, got {self.name!r}",
        )
        for key in ("methods", "models", "seeds", "tasks"):
            check(getattr(self, key) != [], f"{key} must list at least one entry")
        check(self.threads >= 0, f"threads must be an integer >= 0, got {self.threads}")
        check(0 < self.target <= 1, f"target must be in (0, 1], got {self.target}")
        if self.sequential is not None:
            check(
                len(set(self.seeds)) >= self.sequential.cap,
                f"sequential.cap {self.sequential.cap} needs at least as many seeds; seeds lists "
                f"{len(set(self.seeds))}",
            )
        if self.tune is not None:
            both = sorted(set(self.tune.seeds) & set(self.seeds))
            check(not both, f"tune.seeds must be disjoint from seeds (the verdict's); both have {both}")

    def method_entries(self) -> list[MethodEntry]:
        """Every method entry with its label and all its overrides, `all` expanded to the registered
        methods not listed under their own name; checks the names, the labels and the baseline."""
        from bench.registry import METHODS

        for name in self.method_overrides:
            METHODS.get(name)  # an unknown name fails with the valid choices
        listed = {m.label or m.name for m in self.methods if m.name != ALL}
        entries = []
        for m in self.methods:
            if m.name == ALL:
                entries += [MethodEntry(n) for n in METHODS.names() if n not in listed]
            else:
                METHODS.get(m.name)
                entries.append(m)
        entries = [
            MethodEntry(
                m.name,
                m.label or m.name,
                m.options,
                {**(self.method_overrides.get(m.name) or {}), **m.overrides},
                m.placebo,
                m.credit_controls,
            )
            for m in entries
        ]
        entries = self._with_credit_controls(entries)
        self.analysis.placebos = [m.label for m in entries if m.placebo]
        labels = [m.label for m in entries]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        check(
            not twice,
            f"methods: label(s) {', '.join(map(repr, twice))} used twice; give each entry its own label "
            "({name: ..., label: ...})",
        )
        check(
            self.baseline in labels,
            f"baseline {self.baseline!r} is not one of the sweep's method labels: {', '.join(labels)}",
        )
        pairs = [(lab, c) for lab, c in self.analysis.controls.items()]
        pairs += [(lab, c) for lab, cs in self.analysis.credit_controls.items() for c in cs]
        for label, control in pairs:
            for x in (label, control):
                check(
                    x in labels,
                    f"analysis.controls: {x!r} is not one of the sweep's method labels: {', '.join(labels)}",
                )
        return entries

    def _with_credit_controls(self, entries: list[MethodEntry]) -> list[MethodEntry]:
        """``entries`` with each credit method's twin and placebo after it (``credit_controls``), and
        ``analysis.credit_controls`` filled in for them."""
        if not self.credit_controls and all(m.credit_controls is None for m in entries):
            return entries
        from bench.options import build_config
        from bench.registry import METHODS

        out = []
        for m in entries:
            out.append(m)
            cls = METHODS.get(m.name)
            twin = None if m.placebo else cls(build_config(cls.Config, m.options, f"method {m.label!r}")).twin()
            if twin is None:
                continue
            added, controls = [], self.credit_controls if m.credit_controls is None else m.credit_controls
            if "twin" in controls:
                added.append(MethodEntry(m.name, f"{m.label}-twin", {**m.options, **twin}, m.overrides))
            if "placebo" in controls:
                added.append(MethodEntry(m.name, f"{m.label}-placebo", m.options, m.overrides, placebo=True))
            out += added
            if added:
                self.analysis.credit_controls.setdefault(m.label, [a.label for a in added])
        return out


ENTRIES: dict[str, type] = {"tasks": TaskSpec, "eval_tasks": TaskSpec, "methods": MethodEntry, "models": ModelEntry}
"""The list keys whose entries are a name or a mapping: key -> the entry's dataclass."""


def read_spec(path: str | Path) -> SweepSpec:
    """Parse and check the sweep spec at ``path`` (its runs are built by bench.sweep.sweep.load_spec)."""
    path = Path(path)
    if not path.is_file():
        raise CreditBenchError(f"sweep spec {str(path)!r} does not exist")
    where = f"sweep spec {path}"
    try:
        raw = load_yaml(path)  # malformed YAML: the line and column where it breaks
    except CreditBenchError as e:
        raise CreditBenchError(f"sweep spec {e}") from None
    if not isinstance(raw, dict):
        raise CreditBenchError(
            f"{where}: expected a mapping of {', '.join(f.name for f in dataclasses.fields(SweepSpec))}"
        )
    try:
        spec = SweepSpec(**vars(_parse(SweepSpec, _expand(raw))))
        if spec.credit_controls or spec.analysis.credit_controls or any(m.credit_controls for m in spec.methods):
            spec.method_entries()  # names the twins and placebos in analysis.credit_controls and .placebos
        if spec.sequential is not None:
            check(
                bool(spec.analysis.credit_controls),
                "sequential needs credit comparisons to decide: give credit_controls (twin, placebo)",
            )
            spec.analysis.sequential = spec.sequential
        return spec
    except CreditBenchError as e:
        raise spec_error(path, str(e)) from None


def spec_error(path: Path, message: str, base: str | None = None) -> CreditBenchError:
    """``sweep spec PATH:LINE: message``, at the line of the key or value ``message`` names; where the
    spec has none, at its line in the spec's ``base`` run config."""
    where = locate(path, message)
    base_path = path.parent / base if base else None
    if where is None and base_path is not None and base_path.is_file():
        where = f"{path}: base config {locate(base_path, message) or f'{base_path}: '}"
    return CreditBenchError(f"sweep spec {where or f'{path}: '}{message}")


def _expand(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with its shorthands expanded, its keys checked and null values dropped (a null is the
    default, or missing where the key is required)."""
    _check_keys(raw)
    out = {k: v for k, v in raw.items() if v is not None}
    hints = typing.get_type_hints(SweepSpec)
    for key, value in out.items():
        if _is_list(hints[key]):  # one entry given alone is a list of one
            out[key] = value if isinstance(value, list) else [value]
    for key, cls in ENTRIES.items():
        if key in out:
            out[key] = [_entry(cls, key, e) for e in out[key]]
    for f in dataclasses.fields(SweepSpec):
        _check_field(f, hints[f.name], out)
    return out


def _check_keys(raw: dict[str, Any]) -> None:
    """Every key of ``raw`` is a field of the spec (else: did you mean)."""
    names = [f.name for f in dataclasses.fields(SweepSpec)]
    for key in raw:
        if key not in names:
            raise did_you_mean("sweep spec key", key, names)


def _is_list(hint: Any) -> bool:
    """Whether a type hint is ``list[X]`` or ``list[X] | None``."""
    return any(typing.get_origin(h) is list for h in (hint, *typing.get_args(hint)))


def _check_field(f: dataclasses.Field, hint: Any, out: dict[str, Any]) -> None:
    """One field of the spec in ``out``: given where it is required; a schedule block (``sequential``,
    ``tune``) checked by its own dataclass, before the Union of its type hides its errors; a group (a
    dataclass field) a mapping of its fields."""
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in out:
        raise CreditBenchError(f"{f.name!r} is required: {describe_type(hint)}")
    block = {"sequential": SequentialSpec, "tune": Tune}.get(f.name)
    if block is not None and isinstance(out.get(f.name), dict):
        _check_block(f.name, block, out[f.name])
    if dataclasses.is_dataclass(hint) and f.name in out:
        value = out[f.name]
        if not isinstance(value, dict) or set(value) - {g.name for g in dataclasses.fields(hint)}:
            raise CreditBenchError(f"{f.name} must be {describe_type(hint)}, got {value!r}")


def _check_block(name: str, cls: type, value: dict[str, Any]) -> None:
    """A schedule block's keys (did you mean) and its own checks; a value of the wrong type is left to
    jsonargparse, which names it."""
    known = {g.name for g in dataclasses.fields(cls)}
    for k in value:
        if k not in known:
            raise did_you_mean(f"{name} key", k, sorted(known))
    try:
        cls(**value)
    except CreditBenchError:
        raise
    except (TypeError, ValueError, AttributeError):  # a value of the wrong type: jsonargparse says which
        pass


def _entry(cls: type, key: str, entry: Any) -> dict[str, Any]:
    """One entry of a list key as a mapping: a name is ``{name: NAME}``."""
    names = [f.name for f in dataclasses.fields(cls)]
    form = f"a{'n' if key[0] in 'aeiou' else ''} {key} entry is a name or {{{', '.join(names)}}}"
    if isinstance(entry, str) and entry:
        return {"name": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise CreditBenchError(f"{form}, got {entry!r}")
    for k in entry:
        if k not in names:
            raise CreditBenchError(f"{form}: {did_you_mean('key', k, names)}")
    return entry


@functools.cache
def _parser(cls: type):
    from jsonargparse import ArgumentParser

    p = ArgumentParser(exit_on_error=False, default_env=False)
    p.add_class_arguments(cls, None)
    return p


def _parse(cls: type, raw: dict[str, Any]):
    """jsonargparse's namespace of ``cls`` from ``raw``; a type error is one line naming the key."""
    p = _parser(cls)
    try:
        return p.instantiate(p.parse_object(raw))
    except CreditBenchError:
        raise
    except Exception as e:  # jsonargparse: a value of the wrong type
        raise CreditBenchError(_explain(cls, raw, e)) from None


def _explain(cls: type, raw: dict[str, Any], error: Exception) -> str:
    """jsonargparse's error as ``<key> must be <what>, got <value>``; for an entry of a list key,
    the entry's own error, under its name."""
    from bench.run.args import first_line

    found = re.search(r'Parser key "([\w.]+)"', str(error))
    if found is None:
        return first_line(error)
    key, hint, value = found[1], cls, raw
    for part in key.split("."):
        hint, value = typing.get_type_hints(hint)[part], value[part]
    if cls is SweepSpec and key in ENTRIES:
        for entry in value:
            try:
                _parse(ENTRIES[key], entry)
            except CreditBenchError as e:
                return f"{key.removesuffix('s').replace('_', ' ')} {entry['name']!r}: {e}"
    return f"{key.replace('.', ' ')} must be {describe_type(hint)}, got {value!r}"
