"""Benchmark: what the credit ceiling costs and how its Monte-Carlo error moves it -- the oracle's true
advantages (bench.engine.oracle) at a grid of K, and VinePPO's step, on the credit probe's batches.

    python -m bench.perf.oracle_cost [--spec results/sweeps/embedded.yaml] [--reference grpo_lambda-twin]
                                     [--trajectories 4] [--phase 0.5] [--batches 4] [--ks 1,3,9,27]
                                     [--lr 2e-4] [--out results/benchmarks]

On each of ``--batches`` probe batches at the ``--phase`` checkpoint of ``--trajectories`` reference
trajectories (seeds 0, 1, ...) of ``--reference`` (a twin of the sweep), for each K of ``--ks``: the true
advantages' CPU seconds (one torch thread), the continuations sampled, the Monte-Carlo SE of each step
advantage (sqrt(se_k^2 + se_{k+1}^2) from the K rewards' sd of the two states it spans, the last step's
from its state alone), and the oracle's gain over its twin in one update at ``--lr`` (points of J), with
its twin's update on the same batch. Per K: the gain's mean over trajectories with a 95% interval (the
trajectories are the units), and its paired difference from the largest K's, which says whether the
Monte-Carlo error moves the ceiling by less than the ceiling's own interval. Beside: VinePPO's step on
the same batches (its own K = 9 values with steps at the task's delimiter, then its update) against the
twin's update. Writes ``<out>/oracle_cost.{md,json}``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from typing import Any

import numpy as np

from bench.errors import CreditBenchError
from bench.script import machine, machine_line, md_table, run_script, script_parser, write_outputs


def _interval(x: list[float]) -> dict[str, float]:
    from scipy import stats

    a = np.asarray(x, dtype=float)
    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else math.inf
    return {"mean": float(a.mean()), "lo": float(a.mean()) - half, "hi": float(a.mean()) + half, "n": len(a)}


def _step_se(values, se) -> list[float]:
    """Each estimated step's Monte-Carlo SE of its advantage, from its states' value SEs (NaN: not estimated)."""
    out = []
    for v, s in zip(values.tolist(), se.tolist()):
        known = [k for k, x in enumerate(v) if not math.isnan(x)]
        for k in known:
            nxt = s[k + 1] if k + 1 in known else 0.0
            out.append(math.sqrt(s[k] ** 2 + nxt**2))
    return [x for x in out if not math.isnan(x)]


def _update(ws, arm, batch, seed: int) -> tuple[float, float]:
    """``arm``'s update from the checkpoint on ``batch``: its gain in J (points) and its CPU seconds."""
    from bench.engine.exact import exact_objective
    from bench.paired.batches import stream_seed
    from bench.paired.update import rl_step

    ws.reset()
    t = time.process_time()
    rl_step(ws, arm, batch, ws.optimization(arm), stream_seed(seed, "update"))
    spent = time.process_time() - t
    return 100 * (exact_objective(ws.scratch, ws.j_completions, ws.temperature)[0] - ws.j0), spent


def measure(args) -> dict[str, Any]:
    import torch

    from bench.engine.oracle import ADVANTAGE
    from bench.engine.seeding import seeded
    from bench.mc_values import step_values
    from bench.paired.batches import stream_seed
    from bench.paired.plan import Arm, ProbeOptions, oracle_label, probe_plan
    from bench.paired.trajectory import trajectory
    from bench.paired.update import Workspace, draw

    torch.set_num_threads(1)
    plan = probe_plan(args.spec, ProbeOptions(oracle=True, lrs=(args.lr,), oracle_rollouts=max(args.ks)), "results")
    twin_cfg = plan.labels[args.reference]
    from bench.run.resolve import resolve

    delimiter = resolve(twin_cfg).task.step_delimiter  # where the task says its steps end
    if delimiter is None:
        raise CreditBenchError(f"task {twin_cfg.task.name!r} cannot say where its steps end: the ceiling needs one")
    vine_method = dataclasses.replace(twin_cfg.method, name="vineppo", options={"step_delimiter": delimiter})
    vine_cfg = dataclasses.replace(twin_cfg, method=vine_method)
    twin = plan.arms([args.reference])[0]
    oracle = Arm(oracle_label(args.reference), args.lr, plan.arms([oracle_label(args.reference)])[0].cfg)
    vine = Arm("vineppo", args.lr, dataclasses.replace(vine_cfg, rl=twin.cfg.rl))
    rows: dict[int, dict[str, list]] = {k: {"s": [], "n": [], "se": [], "gain": []} for k in args.ks}
    vine_s, twin_s = [], []
    for seed in range(args.trajectories):
        (ckpt,) = trajectory(args.reference, twin_cfg, seed, [args.phase], plan.budget)
        ws = Workspace.build(twin_cfg, ckpt, [twin, oracle, vine], plan.options.eval_problems or 200, probe_seed=0)
        per_k: dict[int, list[float]] = {k: [] for k in args.ks}
        for b in range(args.batches):
            seed_b = ws.seed("batch", b)
            sampler = ws.sampler(ws.policy, twin.cfg, seed_b, shared=True)
            raw, batch = draw(ws, twin, sampler, seed_b)

            dj_twin, s_twin = _update(ws, twin, copy.deepcopy(batch), seed_b)
            twin_s.append(s_twin)
            for k in args.ks:
                n0, t = sampler.extra, time.process_time()
                with seeded(stream_seed(seed_b, "oracle", k)):
                    v = step_values(raw, sampler, k, delimiter, 20)
                rows[k]["s"].append(time.process_time() - t)
                rows[k]["n"].append(sampler.extra - n0)
                rows[k]["se"] += _step_se(v.values, v.se) if k > 1 else []
                trained = copy.deepcopy(batch)
                trained.extra[ADVANTAGE] = v.advantage
                per_k[k].append(_update(ws, oracle, trained, seed_b)[0] - dj_twin)
            t = time.process_time()
            _, vb = draw(ws, vine, sampler, seed_b)  # the same rollouts; VinePPO's own values (K = 9)
            augment = time.process_time() - t
            vine_s.append(augment + _update(ws, vine, vb, seed_b)[1])
        for k in args.ks:
            rows[k]["gain"].append(float(np.mean(per_k[k])))
    top = max(args.ks)
    out = []
    for k in args.ks:
        r = rows[k]
        diff = [a - b for a, b in zip(r["gain"], rows[top]["gain"])]
        out.append({"k": k, "cpu_s": float(np.mean(r["s"])), "continuations": float(np.mean(r["n"])),
                    "advantage_se": float(np.mean(r["se"])) if r["se"] else None, "gain": _interval(r["gain"]),
                    "vs_top": _interval(diff) if k != top else None, "trajectory_gains": r["gain"]})  # fmt: skip
    return {"spec": args.spec, "reference": args.reference, "phase": args.phase, "lr": args.lr,
            "trajectories": args.trajectories, "batches": args.batches, "rows": out,
            "vineppo_step_s": float(np.mean(vine_s)), "twin_update_s": float(np.mean(twin_s)),
            "machine": machine(1)}  # fmt: skip


def markdown(d: dict[str, Any]) -> str:
    def ci(x) -> str:
        return "–" if x is None else f"{x['mean']:+.2f} [{x['lo']:+.2f}, {x['hi']:+.2f}]"

    lines = [
        "# The credit ceiling's cost and Monte-Carlo error",
        "",
        f"`python -m bench.perf.oracle_cost`: {d['batches']} probe batches at phase {d['phase']:g} of each of "
        f"{d['trajectories']} reference trajectories of `{d['reference']}` ({d['spec']}); one update at lr "
        f"{d['lr']:g}. {machine_line(d['machine'])}.",
        "",
        "Per K: the true advantages' CPU seconds and continuations per batch, the mean Monte-Carlo SE of a step "
        "advantage, the oracle's gain over its twin per update (points of J; 95% over trajectories), and its "
        f"paired difference from K = {max(r['k'] for r in d['rows'])}'s (95% over trajectories).",
        "",
        *md_table(
            "K | CPU s / batch | continuations / batch | SE of a step advantage | oracle - twin | minus largest K's",
            [
                (
                    r["k"],
                    f"{r['cpu_s']:.2f}",
                    f"{r['continuations']:.0f}",
                    "–" if r["advantage_se"] is None else f"{r['advantage_se']:.3f}",
                    ci(r["gain"]),
                    ci(r["vs_top"]),
                )
                for r in d["rows"]
            ],  # fmt: skip
            "rrrrll",
        ),
        "",
        f"VinePPO's step on the same batches (its K = 9 values, then its update): {d['vineppo_step_s']:.2f} CPU s "
        f"a batch, against {d['twin_update_s']:.2f} s for the twin's update "
        f"({d['vineppo_step_s'] / d['twin_update_s']:.1f}x).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = script_parser(__doc__, "python -m bench.perf.oracle_cost")
    ap.add_argument("--spec", default="results/sweeps/embedded.yaml")
    ap.add_argument("--reference", default="grpo_lambda-twin")
    ap.add_argument("--trajectories", type=int, default=4)
    ap.add_argument("--phase", type=float, default=0.5)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--ks", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 9, 27])
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--out", default="results/benchmarks")
    args = ap.parse_args(argv)
    data = measure(args)
    md, js = write_outputs(args.out, "oracle_cost", markdown(data), data)
    print(markdown(data), end="")
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    run_script(main, "python -m bench.perf.oracle_cost")
