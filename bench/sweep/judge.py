"""The sweep spec of ``creditbench judge METHOD``: a registered credit method against its credit-off twin
(and its placebo, where its credit selects or weights tokens), with the design of a template spec, the
flagship's by default (results/sweeps/embedded.yaml: its base config, budget, eval grid, tuning grid,
sequential rounds and analysis), on one task and, end to end, at the first of the model sizes.

The spec is written to ``results/sweeps/judge-<label>.yaml`` beside the template (its ``base`` path
stays valid), so the run is reproducible and editable: a second ``judge`` of the same method and
options finds the same file and resumes; a file of that name with other settings is refused rather
than overwritten.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.errors import CreditBenchError
from bench.options import build_config
from bench.registry import METHODS
from bench.sweep.schedule import UNTIL

TEMPLATE = Path("results/sweeps/embedded.yaml")
KEPT = ("base", "budget", "overrides", "eval", "tune", "sequential", "seeds", "threads", "analysis", "credit_probe")
"""What the judge's spec takes from its template; methods, tasks, models, baseline and name are its own."""


@dataclass(frozen=True)
class Judged:
    """What is judged: a registered method with options, under a label, on a task, at model sizes (the
    first end to end, every one per update), against its ``controls`` (twin, placebo)."""

    method: str
    options: dict[str, Any]
    label: str
    task: str
    sizes: tuple[str, ...]
    controls: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"judge-{self.label}"

    def pairs(self) -> list[tuple[str, str]]:
        """(method label, control label) of each comparison, twin first."""
        return [(self.label, f"{self.label}-{c}") for c in self.controls]


def judged(
    method: str,
    options: dict[str, Any] | None = None,
    label: str | None = None,
    task: str = "chain",
    sizes: tuple[str, ...] = ("tiny-500k",),
    controls: tuple[str, ...] | None = None,
) -> Judged:
    """Check what is to be judged, in one line each: the method is registered, its options are its own,
    it has a credit-off twin (a baseline's credit is already uniform), the controls are known and the
    placebo only where it is a control of this method; the defaults: label = method, controls = the twin
    and, where the method's credit selects or weights tokens, the placebo."""
    cls = METHODS.get(method)  # an unknown name: the registered ones
    options = dict(options or {})
    instance = cls(build_config(cls.Config, options, f"method {method!r}"))
    if instance.twin() is None:
        credit = ", ".join(n for n in METHODS.names() if METHODS.get(n).twin_options is not None)
        raise CreditBenchError(
            f"{method} has no credit-off twin (its credit is already uniform: a baseline); judge compares a "
            f"credit method with its twin: {credit}"
        )
    default = ("twin", "placebo") if cls.placebo_control else ("twin",)
    controls = tuple(controls) if controls else default
    unknown = [c for c in controls if c not in ("twin", "placebo")]
    if unknown or "twin" not in controls:
        raise CreditBenchError(
            f"--controls must name twin and may add placebo (twin,placebo), got {','.join(controls)}"
        )
    label = label or method
    if not label.replace("_", "").replace("-", "").isalnum():
        raise CreditBenchError(f"--label must be letters, digits, '_' or '-' (it names files), got {label!r}")
    if not sizes:
        raise CreditBenchError("--sizes needs at least one model size (e.g. tiny-500k)")
    return Judged(method, options, label, task, tuple(sizes), controls)


def size_rates(raw: Any, sizes: tuple[str, ...], where: str) -> dict[str, dict[str, Any]]:
    """A size's own rates, checked in one line each: size -> ``{lr: R, lrs: [A, B]}``, where the probe at
    that size trains its reference trajectories at ``lr`` and updates its arms at ``lrs`` (a size not named
    takes the template's common rates and each label's own rate; tiny-500k's rates are not a larger
    policy's); ``until: resolved`` stops its probe's rounds once each comparison is resolved (the probe's
    option ``until``), ``tuned`` names the sweep that tuned ``lr``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CreditBenchError(f"{where} must map a size to {{lr: R, lrs: [A, B]}}, got {raw!r}")
    out = {}
    for size, entry in raw.items():
        if size not in sizes:
            raise CreditBenchError(f"{where} names size {size!r}, not one of the sizes ({', '.join(sizes)})")
        ok = isinstance(entry, dict) and set(entry) <= {"lr", "lrs", "tuned", "until"} and {"lr", "lrs"} <= set(entry)
        lrs = entry.get("lrs") if ok else None
        rates = [entry["lr"], *lrs] if ok and isinstance(lrs, list) and lrs else []
        if not rates or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in rates):
            raise CreditBenchError(
                f"{where}: {size} must be {{lr: R, lrs: [A, B]}} with rates > 0 (and may name the sweep it was "
                f"tuned in: tuned, and until: resolved), got {entry!r}"
            )
        if entry.get("until", "decided") not in UNTIL:
            raise CreditBenchError(f"{where}: {size}'s until must be one of {', '.join(UNTIL)}, got {entry['until']!r}")
        out[str(size)] = {"lr": float(entry["lr"]), "lrs": [float(x) for x in lrs]} | {
            k: str(entry[k]) for k in ("tuned", "until") if k in entry
        }
    return out


def at_rates(options: dict[str, Any], rates: dict[str, Any] | None) -> bool:
    """Whether a probe made with ``options`` (its recorded ProbeOptions) is at a size's own ``rates``
    (:func:`size_rates`; None: any probe is). A probe that ran its rounds until decided holds one that stops
    once resolved (more rounds, the same design); not the reverse."""
    if not rates:
        return True
    fewer = options.get("until", "decided") == "resolved" and rates.get("until", "decided") == "decided"
    return not fewer and (options.get("lrs"), options.get("trajectory_lr")) == (rates["lrs"], rates["lr"])


def spec(j: Judged, template: Path = TEMPLATE) -> dict[str, Any]:
    """The sweep spec of ``j``: the template's design (:data:`KEPT`), ``j``'s method and controls, task and
    first size; the twin is the baseline of the secondary family (the method is compared with nothing
    else)."""
    if not template.is_file():
        raise CreditBenchError(f"--template {template} not found: give a sweep spec (results/sweeps/*.yaml)")
    base = yaml.safe_load(template.read_text()) or {}
    entry: dict[str, Any] = {"name": j.method, "credit_controls": list(j.controls)}
    if j.label != j.method:
        entry["label"] = j.label
    if j.options:
        entry["options"] = copy.deepcopy(j.options)
    if METHODS.get(j.method).run_settings:  # what the method cannot run without (ARCA: a LoRA adapter)
        entry["overrides"] = dict(METHODS.get(j.method).run_settings)
    out: dict[str, Any] = {
        "name": j.name,
        "description": f"{j.label} against its credit-off twin"
        + (" and its placebo" if "placebo" in j.controls else "")
        + f" on {j.task}, {j.sizes[0]}: the design of {template.name} (creditbench judge)",
    }
    out.update({k: copy.deepcopy(base[k]) for k in KEPT if k in base})
    out.update(tasks=[j.task], methods=[entry], models=[j.sizes[0]], baseline=f"{j.label}-twin")
    analysis = out.get("analysis")
    if isinstance(analysis, dict) and analysis.get("pilot") and list(base.get("tasks") or []) != [j.task]:
        analysis.pop("pilot")  # the template's pilot ran another task: the prior instead
    return out


def write_spec(j: Judged, template: Path = TEMPLATE) -> tuple[Path, bool]:
    """Write :func:`spec` to ``judge-<label>.yaml`` beside the template, or find it there already (the
    same settings: a judge resumed); another file of that name is refused, not overwritten. Returns the
    path and whether this call wrote it."""
    text = (
        f"# creditbench judge {j.method}: {j.label} against its credit-off twin"
        + (" and placebo" if "placebo" in j.controls else "")
        + f".\n# Written by `creditbench judge`; edit and run it with `creditbench sweep` or `creditbench judge "
        f"{j.method}{' --label ' + j.label if j.label != j.method else ''}`.\n"
        + yaml.safe_dump(spec(j, template), sort_keys=False)
    )
    path = template.parent / f"{j.name}.yaml"
    if path.is_file():
        if yaml.safe_load(path.read_text()) != yaml.safe_load(text):
            raise CreditBenchError(
                f"{path} exists with other settings: give another --label, or remove the file (and "
                f"results/{j.name}/) to start over"
            )
        return path, False
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path, True
