"""``creditbench credit-probe``: the whole probe of a sweep, in rounds -- each round's reference
trajectories, then every new checkpoint's paired updates (and segments) in ``jobs`` worker processes,
then the analysis says which pairs need more trajectories -- and its raw records, kept whole in
results/probes/<sweep>/updates.json so the analysis (bench.report.per_update) can be redone."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.atomic import write_atomic
from bench.paired.plan import ProbePlan, describe

PACE_S = {"trajectory_step": 0.75, "update": 0.45, "segment_update": 0.75, "oracle_rollout": 0.15}
"""Seconds of one core per unit at tiny-500k (chain, 16 x 8 samples, 200 J problems), measured: an update
from the whole embedded probe (2,880 paired updates, a quarter of the batches measuring blame alignment,
the arms sharing their scoring and first gradient; results/benchmarks/probe_cost.md), less its trajectories'
steps; an oracle's true advantages cost ``oracle_rollout`` a batch for each of the K continuations per state
(1.36 s at K = 9 on chain, 16 x 8 samples: results/benchmarks/oracle_cost.md), and so do a method's own
Monte-Carlo values (Method.augment_rollouts: a method's step with its own values at K = 9 takes 1.69 s a batch
there, its twin's update 0.31 s). The dry run scales them by the model's parameters, and an update (a
trajectory's RL step) by its label's pace (:func:`label_pace`)."""

LORA_PACE = 1.17
"""An update under a LoRA adapter against the full model's (GRPO at tiny-500k, 1.450 s against 1.237 s at
T=256: results/benchmarks/methods_update.md), and a trajectory's RL step with it."""


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(n or 1)


def _trajectory(args: tuple) -> list:
    from bench.paired.trajectory import trajectory

    label, cfg, seed, phases, budget = args
    _threads(cfg.threads)
    return trajectory(label, cfg, seed, list(phases), budget)


_WORKSPACE: dict[str, Any] = {}  # a worker's workspace of the checkpoint it last worked on


def _work(task: dict[str, Any]) -> list[dict[str, Any]]:
    from bench.engine.data import keep_generated_splits
    from bench.paired.segment import segment
    from bench.paired.update import Workspace, paired_batch

    keep_generated_splits(True)  # the train split is generated once per process
    cfg, ckpt, arms = task["cfg"], task["checkpoint"], task["arms"]
    _threads(cfg.threads)
    if ckpt.name not in _WORKSPACE:
        _WORKSPACE.clear()
        _WORKSPACE[ckpt.name] = Workspace.build(cfg, ckpt, arms, task["problems"], task["seed"])
    ws = _WORKSPACE[ckpt.name]
    if task["kind"] == "segment":
        return [r for i in task["indices"] for r in segment(ws, arms, i, task["steps"])]
    limit = task["oracle_batches"]  # None: the oracle arms update on every batch
    return [
        r
        for i in task["indices"]
        for r in paired_batch(ws, arms, i, task["pairs"], i < task["blame_batches"], oracle=limit is None or i < limit)
    ]


class _Inline:
    """An executor that runs each call at once, in this process (``jobs`` 1)."""

    def submit(self, fn: Callable, *args) -> Future:
        future: Future = Future()
        future.set_result(fn(*args))
        return future

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc) -> None:
        return None


def _pool(jobs: int):
    """``jobs`` spawned worker processes kept for the whole probe (each imports once, quiets the libraries
    as the command line does, and keeps the workspace of the checkpoint it last worked on), or
    :class:`_Inline` for 1."""
    if jobs <= 1:
        return _Inline()
    import multiprocessing

    from bench.run.args import quiet_libraries

    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=quiet_libraries)


def _parts(batches: int, checkpoints: int, jobs: int) -> int:
    """Into how many tasks each checkpoint's batches go: one (its workspace built once) where the round
    has at least two checkpoints a worker, else enough to keep ``jobs`` workers busy."""
    return min(batches, max(1, -(-2 * jobs // max(checkpoints, 1))))


def _chunks(n: int, parts: int) -> list[list[int]]:
    return [c for c in (list(range(n))[i::parts] for i in range(parts)) if c]


def tasks(plan: ProbePlan, checkpoints: dict[str, list], parts: int) -> list[dict[str, Any]]:
    """The work on the checkpoints: each one's batches and segments (fixed in advance), in ``parts`` tasks."""
    o, out = plan.options, []
    problems = o.eval_problems or next(iter(plan.labels.values())).eval.num_problems
    for ref, labels in plan.groups():
        arms = plan.arms(labels)
        pairs = [p for p in plan.pairs if plan.references[p.method] == ref]
        for ckpt in checkpoints.get(ref, []):
            common = {"cfg": plan.labels[ref], "checkpoint": ckpt, "arms": arms, "problems": problems,
                      "seed": o.seed, "pairs": pairs, "blame_batches": o.blame_batches,
                      "oracle_batches": o.oracle_batches}  # fmt: skip
            out += [{**common, "kind": "batch", "indices": c} for c in _chunks(o.batches, parts)]
            out += [
                {**common, "kind": "segment", "indices": c, "steps": o.segment_steps}
                for c in _chunks(o.segment_batches, parts)
            ]
    return out


def _round(plan: ProbePlan, seeds: dict[str, list[int]], pool, jobs: int, log: Callable[[str], None], journal) -> tuple:
    """One round: the reference trajectories of ``seeds`` (reference label -> its new seeds) in ``pool``,
    each trajectory's checkpoints' work submitted as soon as it is trained, and each trajectory kept in
    ``journal`` once its work is done (one it already holds is taken from it); (checkpoints' info, update
    records, segment records)."""
    o = plan.options
    runs = [(ref, plan.labels[ref], s, o.phases, plan.budget) for ref, ss in seeds.items() for s in ss]
    parts = _parts(o.batches, len(runs) * len(o.phases), jobs)  # of the whole round, resumed or not
    kept = [journal.get(r[0], r[2]) for r in runs]
    kept = [k for k in kept if k is not None]
    todo = [r for r in runs if journal.get(r[0], r[2]) is None]
    log(f"credit probe of {plan.sweep}: {len(todo)} reference trajectories, then their checkpoints' batches "
        f"and segments, {jobs} at a time" + (f" ({len(kept)} more kept from before)" if kept else ""))  # fmt: skip
    trained = {pool.submit(_trajectory, run): run[0] for run in todo}
    checkpoints, work, left, infos = [k for r in kept for k in r["checkpoints"]], [], {}, {}
    for future in as_completed(trained):
        ckpts = future.result()
        key = (trained[future], ckpts[0].seed)
        infos[key] = [c.info() for c in ckpts]
        new = [(t, pool.submit(_work, t)) for t in tasks(plan, {trained[future]: ckpts}, parts)]
        work, left[key] = work + new, len(new)
    updates = [u for r in kept for u in r["updates"]]
    segments = [s for r in kept for s in r["segments"]]
    mine: dict[tuple, tuple[list, list]] = {key: ([], []) for key in left}
    for n, (t, future) in enumerate(work, 1):
        key = (t["checkpoint"].reference, t["checkpoint"].seed)
        mine[key][0 if t["kind"] == "batch" else 1].extend(future.result())
        left[key] -= 1
        if not left[key]:
            journal.add(*key, infos[key], *mine[key])
        log(f"  {n}/{len(work)} done")
    for key, (u, s) in mine.items():
        checkpoints, updates, segments = checkpoints + infos[key], updates + u, segments + s
    return checkpoints, updates, segments


Rounds = Callable[[dict[str, Any]], dict[str, int]]
"""Given the probe so far, the trajectories each reference label needs (bench.report.per_update.needs)."""


def run_probe(
    plan: ProbePlan,
    jobs: int = 1,
    log: Callable[[str], None] = print,
    rounds: Rounds | None = None,
    journal: Path | None = None,
) -> dict[str, Any]:
    """Run the probe in rounds of trajectories: ``first`` for every pair, then as many more as ``rounds``
    says the undecided pairs need (one round only without it), up to ``cap``; its raw output (plan,
    checkpoints, one record per arm and batch, segments). ``journal``: the folder that keeps each finished
    trajectory and resumes from those it holds (bench.paired.journal)."""
    from bench.paired.journal import Journal

    o = plan.options
    kept = Journal(journal, describe(plan), _fingerprint(plan))
    seeds = list(dict.fromkeys(o.reference_seeds))
    have = dict.fromkeys((ref for ref, _ in plan.groups()), 0)
    want = dict.fromkeys(have, o.first)
    checkpoints, updates, segments, sizes = [], [], [], []
    with _pool(jobs) as pool:
        while any(want[r] > have[r] for r in have):
            new = {r: seeds[have[r] : want[r]] for r in have if want[r] > have[r]}
            c, u, s = _round(plan, new, pool, jobs, log, kept)
            checkpoints, updates, segments = checkpoints + c, updates + u, segments + s
            have = {r: max(have[r], want[r]) for r in have}
            sizes.append(dict(have))
            if rounds is None:
                break
            needs = rounds(_output(plan, checkpoints, updates, segments))
            want = {r: min(o.cap, max(have[r], needs.get(r, 0))) for r in have}
    return {**_output(plan, checkpoints, updates, segments), "rounds": sizes,
            "wall_s": round(kept.wall_s(), 1), "jobs": jobs}  # fmt: skip


def _fingerprint(plan: ProbePlan) -> dict[str, Any]:
    """What a journal of ``plan`` is keyed on besides the plan: the numerics stack, not the machine (two
    machines whose numerics agree compute the same records, so a journal moves between them)."""
    from bench.environment.fingerprint import fingerprint

    return fingerprint(next(iter(plan.labels.values())).threads or 1)["numerics"]


def journaled(plan: ProbePlan, folder: Path) -> int:
    """How many reference trajectories an interrupted run of ``plan`` kept in ``folder`` (its journal, which
    must be of this plan and numerics: bench.paired.journal)."""
    from bench.paired.journal import resumable

    return resumable(folder, describe(plan), _fingerprint(plan))


def _output(plan: ProbePlan, checkpoints: list, updates: list, segments: list) -> dict[str, Any]:
    from bench.environment.fingerprint import fingerprint

    order = ("reference", "seed", "phase", "batch", "segment", "label", "lr", "k")
    key = lambda r: tuple(r.get(k, 0) for k in order)  # noqa: E731
    cfg = next(iter(plan.labels.values()))
    return {
        "plan": describe(plan),
        "task": cfg.task.name,
        "model": cfg.model.name,
        "checkpoints": sorted(checkpoints, key=lambda c: (c["reference"], c["seed"], c["phase"])),
        "updates": sorted(updates, key=key),
        "segments": sorted(segments, key=key),
        "fingerprint": fingerprint(cfg.threads or 1),
    }


def cost(plan: ProbePlan, kept: int = 0) -> dict[str, float]:
    """What the probe's first round spends (``trajectories``: ``first`` per reference) and what it spends at
    most (every pair at ``cap``): trajectories' RL steps, updates, segment updates, and the seconds of one
    core at the measured pace (scaled by the model's parameters), less the ``kept`` trajectories an
    interrupted run has done (bench.paired.journal; each a trajectory's share of the work)."""
    o = plan.options
    cfg = next(iter(plan.labels.values()))
    steps = -(-plan.budget // (cfg.rl.prompts_per_step * cfg.rl.group_size))
    groups = plan.groups()
    every = [a for _, labels in groups for a in plan.arms(labels)]
    arms = sum(1 for a in every if not a.cfg.method.oracle)
    oracles = len(every) - arms
    truths = sum(1 for _, labels in groups if any(plan.labels[x].method.oracle for x in labels))
    oracle_batches = o.batches if o.oracle_batches is None else o.oracle_batches
    augments = sum(_augment_rollouts(plan, labels) for _, labels in groups)
    pace = {label: label_pace(plan, label) for label in plan.labels}
    per_arm = {  # the pace-weighted arms of a batch, its trajectories' steps and its segments
        "trajectory_step": sum(pace[reference] for reference, _ in groups) * steps,
        "update": sum(pace[a.label] * (oracle_batches if a.cfg.method.oracle else o.batches) for a in every),
        "segment_update": sum(pace[a.label] for a in every if not a.cfg.method.oracle) * o.segment_batches,
    }
    out: dict[str, float] = {}
    for name, n in (("", o.first), ("cap_", o.cap)):
        counts = {
            "trajectory_step": len(groups) * n * steps,
            "update": (arms * o.batches + oracles * oracle_batches) * len(o.phases) * n,
            "oracle_rollout": (truths * oracle_batches * o.oracle_rollouts + augments * o.batches) * len(o.phases) * n,
            "segment_update": arms * o.segment_batches * o.segment_steps * len(o.phases) * n,
        }
        left = max(0, len(groups) * n - kept) / (len(groups) * n)
        counts = {k: round(v * left) for k, v in counts.items()}
        out |= {f"{name}{k}": v for k, v in counts.items()}
        weighted = counts | {
            "trajectory_step": per_arm["trajectory_step"] * n * left,
            "update": per_arm["update"] * len(o.phases) * n * left,
            "segment_update": per_arm["segment_update"] * o.segment_steps * len(o.phases) * n * left,
        }
        out[f"{name}core_s"] = charge(weighted, cfg.model.name)
    return out


def charge(work: dict[str, float], model: str) -> float:
    """Seconds of one core for ``work`` (units of each PACE_S kind, updates and steps weighted by their
    label's pace) on ``model``: the pace constants scaled by its parameters; 0 for a model whose pace is not
    measured (another family: "pace unknown")."""
    from bench.models.policy import TINY_SIZES, tiny_matrix_params

    if model not in TINY_SIZES:
        return 0.0
    return sum(PACE_S[k] * v for k, v in work.items()) * tiny_matrix_params(model) / tiny_matrix_params("tiny-500k")


def label_pace(plan: ProbePlan, label: str) -> float:
    """What an update of ``label`` (and a trajectory's RL step) costs against the pace constants' full-model
    GRPO update: its method's measured pace (Method.update_pace; a placebo's is its method's) under its
    adapter's (:data:`LORA_PACE`)."""
    from bench.run.resolve import resolve

    cfg = plan.labels[label]
    method = resolve(cfg).method
    inner = getattr(method, "method", method)  # a placebo computes its method's credit
    return inner.update_pace * (LORA_PACE if cfg.model.lora.rank else 1.0)


def _augment_rollouts(plan: ProbePlan, labels: list[str]) -> int:
    """The continuations per state that the methods of one reference's ``labels`` sample in ``augment`` on a
    batch (Method.augment_rollouts): once for arms that augment alike (rates of one label, a method and its
    placebo), keyed as bench.paired.update.draw shares them."""
    from bench.run.resolve import resolve

    alike = {}
    for label in labels:
        method = resolve(plan.labels[label]).method
        inner = getattr(method, "method", method)  # a placebo augments as its method does
        alike[(type(inner).__name__, repr(getattr(inner, "config", None)), getattr(method, "oracle", False))] = (
            method.augment_rollouts
        )
    return sum(alike.values())


def write(out: dict[str, Any], folder: str | Path) -> Path:
    """The raw records as updates.json in ``folder`` (written whole, then renamed: never half a file)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return write_atomic(folder / "updates.json", json.dumps(out, separators=(",", ":")) + "\n", per_process=True)
