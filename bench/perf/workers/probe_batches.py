"""One checkpoint's paired batches, measured: the process bench/perf/probe_cost.py starts (in this checkout
or in another one, to compare two versions of the code side by side on one machine).

    python bench/perf/workers/probe_batches.py OUT.json --spec SPEC --reference LABEL --seed S --phase F
                                               --batches N --blame B

Builds the probe's plan of SPEC (the default options), trains reference LABEL's trajectory of seed S and
takes its checkpoint at phase F (unmeasured), builds the checkpoint's workspace (measured on its own),
then runs the batches 0..N-1 of every arm of LABEL's group (blame alignment on the first B) as a probe's
worker does, and writes their records and CPU seconds (``time.process_time``, one torch thread) to
OUT.json, split into phases: draw (the shared rollout batch and each arm's copy), blame (the alignment
of the blame batches), scoring (the no-grad passes before each update), update (forward, backward,
optimizer steps), J (the exact objective after each arm's update) and other (resetting the scratch
policy, its optimizer's state, the alignment with grad J, the record). Only names every version of
bench.paired.update has are wrapped, so older checkouts are measured the same way.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

PHASES = ("draw", "blame", "scoring", "update", "j", "other")
WRAPPED = {"draw": "draw", "blame_alignment": "blame", "score_batch": "scoring", "update": "update",
           "exact_objective": "j"}  # fmt: skip


def positions(prompt_ids, prompt_mask, completion_mask) -> dict[str, float]:
    """A batch's useful positions for the FLOP floor: each distinct prompt's tokens once and each row's
    completion tokens (``positions``), the completion positions whose logits are read (``logits``), and
    the positions each attends to, summed (``context``)."""
    import torch

    distinct = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0)
    p = distinct[:, prompt_ids.shape[1] :].sum(1).double()
    c, rows = completion_mask.sum(1).double(), prompt_mask.sum(1).double()
    context = float((p * (p + 1) / 2).sum() + (c * rows + c * (c + 1) / 2).sum())
    return {"positions": float(p.sum() + c.sum()), "logits": float(c.sum()), "context": context}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--reference", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--phase", type=float, required=True)
    ap.add_argument("--batches", type=int, required=True)
    ap.add_argument("--blame", type=int, required=True)
    ap.add_argument("--set", action="append", default=[], help="rl.KEY=VALUE: an RL option of every label")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from bench.engine.data import keep_generated_splits
    from bench.engine.scoring import REFERENCE_NEEDS
    from bench.paired import update as paired
    from bench.paired.plan import ProbeOptions, probe_plan
    from bench.paired.trajectory import trajectory

    keep_generated_splits(True)
    plan = probe_plan(args.spec, ProbeOptions(phases=(args.phase,)))
    if args.set:  # RL options of every label (a baseline checkout is never given any)
        from bench.perf.rl_settings import with_rl_settings

        for label, cfg in plan.labels.items():
            plan.labels[label] = with_rl_settings(cfg, args.set)
    groups = dict(plan.groups())
    if args.reference not in groups:
        raise SystemExit(f"unknown reference {args.reference!r}: give one of {', '.join(groups)}")
    arms = plan.arms(groups[args.reference])
    pairs = [p for p in plan.pairs if plan.references[p.method] == args.reference]
    cfg = plan.labels[args.reference]
    checkpoint = trajectory(args.reference, cfg, args.seed, [args.phase], plan.budget)[0]
    problems = plan.options.eval_problems or cfg.eval.num_problems

    t = time.process_time()
    ws = paired.Workspace.build(cfg, checkpoint, arms, problems, plan.options.seed)
    build_s = time.process_time() - t

    seconds = dict.fromkeys(PHASES, 0.0)
    depth = [0]

    def timed(fn, phase):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            if depth[0]:  # inside another measured phase: charged to it
                return fn(*a, **k)
            depth[0] += 1
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                seconds[phase] += time.process_time() - t0
                depth[0] -= 1

        return wrapper

    for name, phase in WRAPPED.items():
        setattr(paired, name, timed(getattr(paired, name), phase))
    seen: list = []
    shapes = paired.update

    def first_update(policy, method, batch, *a, **k):  # the positions of the batch the arms train on
        if not seen:
            seen.append(positions(batch.prompt_ids, batch.prompt_mask, batch.completion_mask))
        return shapes(policy, method, batch, *a, **k)

    paired.update = first_update
    records, per_batch = [], []
    for index in range(args.batches):
        t = time.process_time()
        records += paired.paired_batch(ws, arms, index, pairs, index < args.blame)
        per_batch.append(time.process_time() - t)
    seconds["other"] = sum(per_batch) - sum(seconds[p] for p in PHASES if p != "other")
    refs = ws.j_completions
    j = positions(refs.prompt_ids, refs.prompt_mask, refs.completion_mask)
    out = {"build_s": build_s, "batch_s": per_batch, "phases": seconds, "arms": len(arms), "pairs": len(pairs),
           "labels": len({a.label for a in arms}), "model": cfg.model.name, "records": records,
           "reference_pass": any(m.required & REFERENCE_NEEDS for m in ws.methods.values()),
           "positions": {"batch": seen[0], "j": j}}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
