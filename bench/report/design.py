"""What a sweep's design can resolve before it runs: ``creditbench sweep SPEC --dry_run`` prints the
minimum detectable difference of its primary comparisons (bench.report.sizing.design_mde), so a
user sizes seeds and eval before spending the compute.

The variance comes from the spec's ``analysis`` section: a pilot sweep's finished runs
(``analysis.pilot``: the training and eval-sampling components estimated from their per-problem
counts, per training task) or a prior (``analysis.sd_train`` and ``analysis.sd_item``). The family
is every label against the baseline (or its control) on every model and training task, as the
report forms it (bench.report.comparisons).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from bench.errors import CreditBenchError
from bench.report import sizing


def _pilot_runs(results_dir: str, pilot: str | None) -> list:
    """The pilot sweep's finished runs; [] without a pilot or without finished runs (e.g. a fresh clone of
    a sweep whose runs/ is not kept)."""
    from bench.report.summary import load_runs

    if not pilot:
        return []
    try:
        return load_runs(results_dir, pilot)
    except CreditBenchError:
        return []


def _pilot_components(results_dir: str, pilot: str, task: str, metric: str) -> sizing.VarianceComponents | None:
    """The variance components of ``task`` in the pilot sweep's runs (None when it has no runs of
    that task with per-problem counts)."""
    counts: dict[str, dict[int, np.ndarray]] = defaultdict(dict)
    n = 0
    for r in _pilot_runs(results_dir, pilot):
        point = next((e for e in reversed(r.history) if task in e.eval), None)
        if r.task != task or point is None or not getattr(point, "per_problem", {}).get(task) or not r.eval_n:
            continue
        counts[f"{r.label}/{r.model}"][r.seed] = np.asarray(point.per_problem[task])
        n = r.eval_n
    if len(counts) < 2:
        return None
    try:
        return sizing.estimate_variance_components(counts, n)
    except CreditBenchError:
        return None


@dataclass(frozen=True)
class _Design:
    """What the dry run sizes: the sweep's labels, models and training tasks, its seeds, each run's eval,
    and its two families: every label against the baseline (or its control; placebos are controls only)
    and each credit method against its twin or placebo, on every model and task."""

    labels: list[str]
    models: list[str]
    tasks: list[str]
    seeds: int
    main: int  # labels in the family with the baseline
    m: int  # comparisons with the baseline
    m_credit: int  # credit comparisons
    n: int  # eval samples per problem
    problems: int  # eval problems (0: the task's whole eval split)

    @classmethod
    def of(cls, sweep) -> _Design:
        a, runs = sweep.spec.analysis, sweep.runs
        labels = list(dict.fromkeys(r.label for r in runs))
        models = list(dict.fromkeys(r.cfg.model.name for r in runs))
        tasks = list(dict.fromkeys(r.cfg.task.name for r in runs))
        main = len([lab for lab in labels if lab not in a.controls and a.control(lab) != "placebo"])
        cells = len(models) * len(tasks)  # every comparison is made on each model and task
        e = runs[0].cfg.eval
        return cls(
            labels=labels,
            models=models,
            tasks=tasks,
            seeds=len(sweep.spec.seeds),
            main=main,
            m=(main - 1 + len(a.controls)) * cells,
            m_credit=sum(len(cs) for cs in a.credit_controls.values()) * cells,
            n=e.n,
            problems=e.num_problems,
        )


def design_lines(sweep, results_dir: str = "results", jobs: int = 1) -> list[str]:
    """The dry run's design lines: per training task the family size, the variance used and the MDE
    of the primary metric at the spec's seeds, eval problems and samples (and the seeds a 3-point
    and a 2-point MDE would need)."""
    d = _Design.of(sweep)
    out = [_design_line(d, sweep.spec.analysis), cost_line(sweep, results_dir, jobs)]
    if not d.problems:
        out.append("  (eval.num_problems 0: the task's whole eval split; the MDE below assumes 200 problems)")
    for task in d.tasks:
        out += _task_lines(sweep, d, task, results_dir)
    return out


def _design_line(d: _Design, a) -> str:
    credit = f", and first {d.m_credit} of each credit method with its twin or placebo (Holm on their own)"
    return (
        f"design: {d.seeds} seeds x {len(d.labels)} labels x {len(d.models)} model(s) x {len(d.tasks)} task(s); "
        f"{d.m} comparisons with the baseline on {a.metric} (Holm, alpha {a.alpha})"
        + (credit if d.m_credit else "")
        + f"; eval {d.problems or 'all'} problems x {d.n} samples"
    )


def _task_lines(sweep, d: _Design, task: str, results_dir: str) -> list[str]:
    """One training task's MDE lines: each family's MDE (the credit family's first), the variance's
    source, and with a pilot each credit comparison's own MDE."""
    a = sweep.spec.analysis
    found = _variance(a, task, results_dir)
    if found is None:
        hint = f" (pilot {a.pilot!r} has no runs of it with per-problem counts)" if a.pilot else ""
        return [
            f"  {task}: no variance to size the design with{hint}; give analysis.sd_train and analysis.sd_item, "
            "or analysis.pilot (a finished sweep's name)"
        ]
    sd, source = found
    families = [("vs the baseline", d.main, d.m)] + ([("vs twin or placebo", 2, d.m_credit)] if d.m_credit else [])
    design = [(which, (d.problems or 200, d.n, k, family)) for which, k, family in families[::-1]]
    out = [f"  {task}, {which}: " + _mde_text(sd, d.seeds, size, a) for which, size in design]
    out.append(f"    ({source})")
    if a.pilot and d.m_credit:
        out += _pair_lines(sweep, results_dir, task, d.m_credit)
    return out


def _variance(a, task: str, results_dir: str) -> tuple[tuple[float, float], str] | None:
    """(sd_train, sd_item) to size ``task`` with and where they come from: the pilot's runs of the task,
    else the spec's prior; None without either."""
    comp = _pilot_components(results_dir, a.pilot, task, a.metric) if a.pilot else None
    if comp is not None:
        return (comp.sd_train, comp.sd_item), (
            f"pilot {a.pilot!r} ({comp.df} residual df): sd_train {comp.sd_train:.4f}, sd_item {comp.sd_item:.3f}, "
            f"run sd {comp.sd_run:.4f} at {comp.n_problems} problems x {comp.n_samples}"
        )
    if a.sd_train is not None and a.sd_item is not None:
        return (a.sd_train, a.sd_item), f"prior: sd_train {a.sd_train:.4f}, sd_item {a.sd_item:.3f}"
    return None


def sequential_lines(sweep, results_dir: str = "results", jobs: int = 1, sims: int = 400) -> list[str]:
    """A sequential sweep's expected cost: the credit family simulated look by look
    (bench.report.sizing.simulate) with each pair's SD from the pilot's runs (else the prior's),
    with no true difference and with every difference at the margin; the expected runs, their time at
    the pilot's pace, and the worst case (every comparison to the cap)."""
    from bench.report.comparisons import credit_pairs

    a, schedule = sweep.spec.analysis, sweep.spec.sequential
    family = {f"{m} vs {c}": {"method": m, "control": c} for m, cs in a.credit_controls.items() for c in cs}
    done = _pilot_runs(results_dir, a.pilot)
    found = _pair_sds(family, credit_pairs(done, a) if done else {}, _prior_sd(a, sweep.runs[0].cfg), a.pilot)
    if found is None:
        head = f"sequential: {schedule.first} seeds first, {schedule.step} per round, at most {schedule.cap}"
        return [f"{head}; no variance to simulate its cost with (give analysis.sd_train and sd_item, or a pilot)"]
    sds, source = found
    in_family = {v for p in family.values() for v in p.values()}
    others = len([lab for lab in sweep.labels if lab not in in_family])
    pace = float(np.mean([r.wall_s for r in done])) if done else None

    def minutes(runs: float) -> str:
        return "" if pace is None else f", about {runs * pace / jobs / 60:.0f} min at --jobs {jobs}"

    out = [
        f"sequential: {schedule.first} seeds first, {schedule.step} more per round for the undecided, at most "
        f"{schedule.cap} ({schedule.spending} spending, Holm across {len(family)} comparisons, equivalence "
        f"±{a.margin:g}); expected cost, {sims} simulated sweeps with each pair's sd from the {source}:"
    ]
    for what, truth in (("no true difference", 0.0), (f"every difference {a.margin:+g}", a.margin)):
        r = sizing.simulate(sds, [truth] * len(sds), schedule, a.alpha, a.margin, sims, 0)
        runs = sizing.runs_needed(family, r["seeds_all"], schedule.first, others)
        per = ", ".join(f"{x:.0f}" for x in r["seeds"])
        out.append(f"  {what}: {runs:.0f} runs expected{minutes(runs)}; seeds per comparison {per}")
    worst = len(in_family) * schedule.cap + others * schedule.first
    out.append(f"  at most {worst} runs (every comparison to the cap){minutes(worst)}")
    return out


def _prior_sd(a, cfg) -> float | None:
    """The SD of a paired difference of two runs' primary metric under the spec's prior: sqrt(2) x the
    run SD, sqrt(sd_train^2 + sd_item^2 / (n x problems)); None without a prior."""
    if a.sd_train is None or a.sd_item is None:
        return None
    return math.sqrt(2) * math.sqrt(a.sd_train**2 + a.sd_item**2 / (cfg.eval.n * (cfg.eval.num_problems or 200)))


def _pair_sds(family: dict, measured: dict, prior: float | None, pilot: str | None) -> tuple[list[float], str] | None:
    """Each pair's SD of its paired differences: the pilot's where it has 3 seeds or more, else the prior's;
    with where they come from ("pilot ..." once any pair is measured). None where a pair has neither."""
    sds, source = [], "prior"
    for pair in family.values():
        d = next((list(p["diffs"].values()) for p in measured.values()
                  if (p["method"], p["control"]) == (pair["method"], pair["control"])), [])  # fmt: skip
        if len(d) >= 3:
            sds.append(float(np.std(d, ddof=1)))
            source = f"pilot {pilot!r}"
        elif prior is not None:
            sds.append(prior)
        else:
            return None
    return sds, source


def _pair_lines(sweep, results_dir: str, task: str, family: int) -> list[str]:
    """Each credit comparison's own MDE at the spec's seeds, from the sd of its paired (same seed)
    differences in the pilot's runs: a two-label comparison estimates its own variance, and a twin or
    placebo may spread more than the pooled variance says."""
    from bench.stats.power import mde

    a, seeds = sweep.spec.analysis, len(sweep.spec.seeds)
    final = {(r.label, r.seed): r.final.get(a.metric) for r in _pilot_runs(results_dir, a.pilot) if r.task == task}
    out = []
    for label, controls in a.credit_controls.items():
        for control in controls:
            shared = sorted(s for (lab, s) in final if lab == label and (control, s) in final)
            if len(shared) < 3 or seeds < 2:
                continue
            sd = float(np.std([final[label, s] - final[control, s] for s in shared], ddof=1))
            size = mde(sd, seeds, seeds - 1, a.alpha, family, a.power, paired=True)
            need = next(
                (k for k in range(3, 201) if mde(sd, k, k - 1, a.alpha, family, a.power, paired=True) <= 0.03), None
            )
            out.append(
                f"    {label} vs {control}: MDE {100 * size:.1f} points (paired sd {sd:.4f} over the pilot's "
                f"{len(shared)} seeds); seeds for 3 points: {need or '>200'}"
            )
    return out


def _mde_text(sd: tuple[float, float], seeds: int, design: tuple, a) -> str:
    """One family's MDE at ``seeds`` and the seeds a 3- and a 2-point MDE would need."""
    mde = sizing.design_mde(*sd, seeds, *design, a.alpha, a.power)
    need = [sizing.seeds_needed(t, *sd, *design, a.alpha, a.power, max_seeds=200) for t in (0.03, 0.02)]
    shown = "none (fewer than 2 seeds)" if mde is None else f"{100 * mde:.1f} points"
    return (
        f"MDE of {a.metric} {shown} at {a.power:.0%} power ({design[3]} comparisons); seeds for a 3-point MDE: "
        f"{need[0] or '>200'}, for 2 points: {need[1] or '>200'}"
    )


def cost_line(sweep, results_dir: str = "results", jobs: int = 1) -> str:
    """What the sweep generates: its runs' training samples and eval completions, and, from the pilot's
    runs (their mean run time per generated completion, training and eval alike), its run time."""
    runs = sweep.runs
    train = sum(r.cfg.rl.budget_samples for r in runs)
    evals = _eval_completions_all(runs)
    line = f"cost: {len(runs)} runs, {train:,} training samples and {evals:,} eval completions"
    pilot = sweep.spec.analysis.pilot
    done = _pilot_runs(results_dir, pilot) if train else []
    if not done:
        return line
    per = sum(r.wall_s for r in done) / sum(r.samples + _eval_completions_done(r) for r in done)
    total = per * (train + evals) / 60
    pace = f"at the pace of pilot {pilot!r}'s runs"
    return f"{line}; {pace} about {total:,.0f} min of run time, {total / jobs:,.0f} min at --jobs {jobs}"


def _eval_completions_all(runs) -> int:
    """Eval completions of ``runs``, a base eval that runs share (``eval.reuse_base``: one per seed,
    model, task and eval setting, and per label where an adapter gives the label its own weights)
    counted once."""
    import json

    total, bases = 0, set()
    for r in runs:
        cfg, e = r.cfg, r.cfg.eval
        total += _eval_completions(cfg)
        if e.reuse_base and cfg.trainer.world_size == 1 and cfg.rollout.engine == "hf":
            key = (cfg.seed, cfg.model.name, cfg.model.lora.rank and r.label, json.dumps(dataclasses.asdict(cfg.task)))
            key += (e.n, e.num_problems, e.validation, json.dumps([dataclasses.asdict(t) for t in e.tasks]))
            total -= (e.num_problems or 200) * e.n * (1 + len(e.tasks)) if key in bases else 0
            bases.add(key)
    return total


def _eval_completions(cfg) -> int:
    """Eval completions of one run: its eval points (step 0, each ``every_samples``, the end) x problems x n."""
    e = cfg.eval
    points = 1 + (-(-cfg.rl.budget_samples // e.every_samples) if e.every_samples else cfg.rl.steps // e.every + 1)
    return points * (e.num_problems or 200) * e.n * (1 + len(e.tasks))


def _eval_completions_done(run) -> int:
    """Eval completions a finished run generated (its eval points x problems x n, every eval task; not
    a base eval it reused)."""
    points = run.history[1:] if run.base_eval_reused else run.history
    return sum(len(p.per_problem.get(t, ())) * run.eval_n for p in points for t in p.eval)
