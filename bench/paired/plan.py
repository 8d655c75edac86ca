"""What a credit probe measures: its options, its arms (a sweep label at a learning rate) and the pairs it
compares, built from a sweep spec (its labels, credit controls, run configuration and tuned rates)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config import RunConfig
from bench.core import check
from bench.errors import CreditBenchError
from bench.sweep.schedule import UNTIL, SequentialSpec


@dataclass(frozen=True)
class ProbeOptions:
    batches: int = 8
    """Rollout batches per checkpoint, fixed in advance (every arm updates on each)."""
    blame_batches: int = 2
    """Blame alignment (a credit statistic, not a gain) is measured on the first this many batches of each
    checkpoint (it costs about a third of a batch's time)."""
    phases: tuple[float, ...] = (0.0, 0.5, 1.0)
    """Where the checkpoints sit along each reference trajectory, as fractions of the sweep's sample budget
    (0: the base policy with a fresh AdamW; f: after the first RL step that reaches f x budget)."""
    reference_seeds: tuple[int, ...] = tuple(range(12))
    """Seeds of the reference trajectories, in the order they are added (each gives one checkpoint per
    phase); at least ``cap`` of them."""
    first: int = 4
    """Trajectories of the first round (every pair)."""
    step: int = 2
    """Trajectories added per round to the pairs with a comparison still undecided."""
    cap: int = 12
    """The most trajectories a pair gets."""
    until: str = "decided"
    """When a pair stops taking rounds: ``decided`` (every comparison crossed a boundary, or the cap), or
    ``resolved`` (every comparison decided or its repeated interval within the credit table's target:
    bench.report.per_update.within_target). The repeated intervals keep their coverage at any stop."""
    spending: str = "obf"
    """Alpha spending over the rounds' looks (bench.stats.spending): obf or pocock."""
    alpha: float = 0.05
    """The family-wise error rate of the probe's verdicts (every pair at every rate)."""
    margin: float = 0.10
    """Equivalence margin, a fraction of the control's own gain per update."""
    reference: str = "control"
    """Whose trajectory the checkpoints come from: ``control`` (each pair's own control, its twin, at its
    tuned rate; batches are then shared within a pair), or a label of the sweep (one trajectory for every
    pair, and one batch shared by every arm that draws the same rollouts)."""
    lrs: tuple[float, ...] = (1e-4, 2e-4)
    """Common learning rates: every arm updates at each (besides its tuned rate, when the sweep has one)."""
    trajectory_lr: float | None = None
    """The rate the reference trajectories train at (None: each reference label's own, its tuned rate or
    the sweep's). A model in place of the sweep's is given its own size's rate here (the credit table's
    ``rates``), since tiny-500k's rate is not a larger policy's."""
    placebo: bool = False
    """Also update each method's placebo, where the sweep lists one."""
    oracle: bool = False
    """Also update each twin's oracle (bench.engine.oracle: the twin's credit moved onto the Monte-Carlo step
    advantages), paired with the twin: the ceiling each method's effect is read against (bench.report.oracle)."""
    oracle_rollouts: int = 9
    """K: continuations per state of the oracle's values (and of the credit-quality scores' true advantage)."""
    oracle_batches: int | None = None
    """The oracle arms update, and the credit-quality scores are taken, on the first this many batches of each
    checkpoint (None: every batch); the other arms on every batch."""
    segment_steps: int = 0
    """K > 0: paired segments of K updates per arm with common random numbers (bench.paired.segment)."""
    segment_batches: int = 0
    """Segments per checkpoint (each from its own seed)."""
    eval_problems: int | None = None
    """Problems J is scored on (the first of the eval split; default: the sweep's eval.num_problems)."""
    model: str | None = None
    """A model in place of the sweep's (e.g. tiny-2m); the sweep's tuned rates are then not its own and
    only the common rates are probed."""
    seed: int = 0
    """Seed of the probe's batches (rows and sampling), disjoint from every run's streams by construction:
    a validation that is new data takes its own seed (and its own reference seeds)."""

    def __post_init__(self) -> None:
        from bench.stats.paired import MIN_SEEDS
        from bench.stats.spending import SPENDING

        check(self.batches >= 1, f"batches must be >= 1, got {self.batches}")
        check(
            bool(self.phases) and all(0.0 <= f <= 1.0 for f in self.phases),
            f"phases must be fractions of the budget in [0, 1], got {list(self.phases)}",
        )
        check(self.first >= MIN_SEEDS, f"first must be >= {MIN_SEEDS} trajectories (no interval from fewer), "
              f"got {self.first}")  # fmt: skip
        check(self.step >= 1, f"step must be >= 1 trajectory, got {self.step}")
        check(self.cap >= self.first, f"cap must be >= first ({self.first}), got {self.cap}")
        check(self.until in UNTIL, f"until must be one of {', '.join(UNTIL)}, got {self.until!r}")
        check(self.spending in SPENDING, f"spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")
        check(0 < self.alpha < 1, f"alpha must be in (0, 1), got {self.alpha}")
        check(self.margin > 0, f"margin must be > 0 (a fraction of the control's gain), got {self.margin}")
        check(
            len(set(self.reference_seeds)) >= self.cap,
            f"reference_seeds must list at least cap = {self.cap} distinct seeds, got {len(set(self.reference_seeds))}",
        )
        check(all(x > 0 for x in self.lrs), f"lrs must be learning rates > 0, got {list(self.lrs)}")
        check(
            self.trajectory_lr is None or self.trajectory_lr > 0,
            f"trajectory_lr must be a learning rate > 0 (null: each label's own), got {self.trajectory_lr}",
        )
        check(self.segment_steps >= 0 and self.segment_batches >= 0, "segment_steps and segment_batches must be >= 0")
        check(self.oracle_rollouts >= 1, f"oracle_rollouts must be >= 1, got {self.oracle_rollouts}")
        check(
            self.oracle_batches is None or 1 <= self.oracle_batches <= self.batches,
            f"oracle_batches must be in [1, batches = {self.batches}] (null: every batch), got {self.oracle_batches}",
        )
        check(
            (self.segment_steps > 0) == (self.segment_batches > 0),
            "segment_steps and segment_batches go together (both > 0, or both 0)",
        )

    @property
    def schedule(self) -> SequentialSpec:
        """Trajectories in rounds: ``first``, then ``step`` more for the undecided pairs, up to ``cap``."""
        return SequentialSpec(first=self.first, step=self.step, cap=self.cap, spending=self.spending)


@dataclass(frozen=True)
class Arm:
    """One label of the sweep updating at one learning rate."""

    label: str
    lr: float
    cfg: RunConfig  # the label's run configuration (its first task, model and seed), rl.lr = lr

    @property
    def key(self) -> str:
        return f"{self.label}@{self.lr:g}"


@dataclass(frozen=True)
class Pair:
    method: str  # the credit method's label
    control: str  # its twin's or placebo's label
    kind: str  # "twin" | "placebo" | "oracle" (the twin's oracle against the twin: the ceiling)


@dataclass
class ProbePlan:
    """A probe's arms and pairs: ``labels`` (label -> run config at its tuned rate), the pairs, the
    rates every arm updates at (``rates[label]``: the common grid and its tuned rate), each pair's
    reference label."""

    sweep: str
    labels: dict[str, RunConfig]
    pairs: list[Pair]
    rates: dict[str, list[float]]
    tuned: dict[str, float]
    references: dict[str, str]  # pair method label -> the label whose trajectory gives its checkpoints
    options: ProbeOptions
    budget: int = 0
    notes: list[str] = field(default_factory=list)
    credit_controls: dict[str, list[str]] = field(default_factory=dict)  # the sweep's, as its report pairs them

    def arms(self, labels: list[str]) -> list[Arm]:
        """Every arm of ``labels``, in order."""
        out = []
        for label in labels:
            cfg = self.labels[label]
            out += [Arm(label, lr, _with_lr(cfg, lr)) for lr in self.rates[label]]
        return out

    def groups(self) -> list[tuple[str, list[str]]]:
        """(reference label, the labels whose arms update from its checkpoints): one group per
        reference trajectory."""
        out: dict[str, list[str]] = {}
        for p in self.pairs:
            labels = out.setdefault(self.references[p.method], [])
            labels += [x for x in (p.method, p.control) if x not in labels]
        return list(out.items())


def _with_lr(cfg: RunConfig, lr: float) -> RunConfig:
    """``cfg`` updating at the constant rate ``lr`` (a probe's updates sit at one point of no schedule)."""
    return dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, lr=lr, schedule="constant", warmup_steps=0))


def probe_plan(spec_path: str | Path, options: ProbeOptions, results_dir: str | Path = "results") -> ProbePlan:
    """The probe of the sweep at ``spec_path``: each credit method (``analysis.credit_controls``) against
    its twin (and placebo), every label at the common rates and at its tuned one."""
    from bench.sweep.sweep import load_spec
    from bench.sweep.tuning import tuning_path

    sweep = load_spec(spec_path, results_dir)
    spec = sweep.spec
    controls = spec.analysis.credit_controls
    if not controls:
        raise CreditBenchError(
            f"sweep {spec.name!r} lists no credit controls: the probe compares each credit method with its "
            "twin; add credit_controls: [twin] to the spec"
        )
    first = _first_configs(sweep.runs, options.model)
    _check_references(first)
    pairs = _pairs(controls, first, options.placebo)
    budget = spec.budget.as_dict().get("samples", 0)
    check(budget > 0, "the credit probe needs a sweep with a sample budget (budget: {samples: N})")
    tuned_here = spec.tune and tuning_path(results_dir, spec.name).is_file() and options.model is None
    tuned = {label: cfg.rl.lr for label, cfg in first.items()} if tuned_here else {}
    labels = {x: _trajectory_rate(first[x], options.trajectory_lr) for p in pairs for x in (p.method, p.control)}
    rates = {x: sorted({*options.lrs, *([tuned[x]] if x in tuned else [])}) for x in labels}
    references = _trajectory_labels(pairs, first, options.reference, spec.name)
    if options.oracle:
        _add_oracles(pairs, labels, rates, tuned, references, options)
    if options.reference != "control":  # the named label's trajectory: its configuration is needed too
        labels[options.reference] = _trajectory_rate(first[options.reference], options.trajectory_lr)
    notes = [] if tuned else [f"no tuned rates for this model (results/{spec.name}/tuning.json): the common rates only"]
    if options.trajectory_lr is not None:
        notes.append(f"the reference trajectories train at lr {options.trajectory_lr:g} (trajectory_lr)")
    return ProbePlan(
        sweep=spec.name,
        labels=labels,
        pairs=pairs,
        rates=rates,
        tuned=tuned,
        references=references,
        options=options,
        budget=budget,
        notes=notes,
        credit_controls=dict(controls),
    )


def _trajectory_rate(cfg: RunConfig, lr: float | None) -> RunConfig:
    """``cfg`` whose run (a reference trajectory) trains at ``lr``, its schedule kept; None: as it is. The
    arms take their own rates (:func:`_with_lr`), so only the trajectories see this one."""
    return cfg if lr is None else dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, lr=lr))


def _first_configs(runs: list, model: str | None) -> dict[str, RunConfig]:
    """Each label's first run configuration (its first task, model and seed), on ``model`` when given."""
    first: dict[str, RunConfig] = {}
    for run in runs:
        first.setdefault(run.label, run.cfg)
    if model is None:
        return first
    _check_model(model)
    return {k: dataclasses.replace(c, model=dataclasses.replace(c.model, name=model)) for k, c in first.items()}


def _pairs(controls: dict[str, list[str]], first: dict[str, RunConfig], placebo: bool) -> list[Pair]:
    """Each credit method against each of its controls: its twin always, its placebo when ``placebo``
    (a control is a placebo by its run configuration's flag, ``method.placebo``)."""
    pairs = []
    for method, ctrls in controls.items():
        for c in ctrls:
            kind = "placebo" if first[c].method.placebo else "twin"
            if kind == "twin" or placebo:
                pairs.append(Pair(method, c, kind))
    return pairs


def oracle_label(twin: str) -> str:
    return f"{twin}-oracle"


def _add_oracles(pairs: list[Pair], labels: dict, rates: dict, tuned: dict, references: dict, o: ProbeOptions) -> None:
    """Each twin's oracle (its run configuration with ``method.oracle``) at the twin's rates and reference,
    paired with the twin (kind "oracle"); refused in one line on a task without steps."""
    from bench.run.resolve import resolve

    for p in [p for p in pairs if p.kind == "twin"]:
        name = oracle_label(p.control)
        if name in labels:
            continue
        cfg = labels[p.control]
        cfg = dataclasses.replace(
            cfg, method=dataclasses.replace(cfg.method, oracle=True, oracle_rollouts=o.oracle_rollouts)
        )
        resolve(cfg)  # the task must say where its steps end
        labels[name], rates[name] = cfg, list(rates[p.control])
        if p.control in tuned:
            tuned[name] = tuned[p.control]
        references[name] = references[p.method]
        pairs.append(Pair(name, p.control, "oracle"))


def _trajectory_labels(pairs: list[Pair], first: dict[str, RunConfig], reference: str, sweep: str) -> dict[str, str]:
    """Each pair's method label -> the label whose reference trajectory gives its checkpoints
    (:attr:`ProbeOptions.reference`): the pair's twin (else its control), or one label of the sweep for all."""
    if reference == "control":
        twin_of = {p.method: p.control for p in pairs if p.kind == "twin"}
        return {p.method: twin_of.get(p.method, p.control) for p in pairs}
    if reference not in first:
        raise CreditBenchError(
            f"reference {reference!r} is not a label of sweep {sweep!r}; valid: control, " + ", ".join(first)
        )
    return {p.method: reference for p in pairs}


def _check_model(name: str) -> None:
    """A model the probe can load: a tiny size, a local directory, or a Hub id (from the Hub's cache)."""
    from bench.models.policy import TINY_SIZES

    if name not in TINY_SIZES and not Path(name).is_dir() and "/" not in name:
        raise CreditBenchError(
            f"unknown model {name!r}: give a tiny size ({', '.join(TINY_SIZES)}), a local directory or a Hub id "
            "(org/name)"
        )


def _check_references(configs: dict[str, RunConfig]) -> None:
    """J needs one reference completion per eval problem: refuse a task that has none, before any work."""
    from bench.engine.data import load_split
    from bench.run.resolve import resolve

    cfg = next(iter(configs.values()))
    task = resolve(cfg).task
    row = load_split(task, "eval")[0]
    if task.reference(row) is None:
        raise CreditBenchError(
            f"task {cfg.task.name!r} has no reference completion per problem (Task.reference), so the exact "
            "objective J the probe scores is not defined for it; probe a sweep on a task that has one "
            "(docs/tasks.md#the-exact-objective-j)"
        )


def describe(plan: ProbePlan) -> dict[str, Any]:
    """The plan as the probe's output records it."""
    return {
        "sweep": plan.sweep,
        "pairs": [dataclasses.asdict(p) for p in plan.pairs],
        "rates": plan.rates,
        "tuned": plan.tuned,
        "references": plan.references,
        "options": dataclasses.asdict(plan.options),
        "budget_samples": plan.budget,
        "notes": plan.notes,
        "credit_controls": plan.credit_controls,
    }
