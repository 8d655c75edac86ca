"""Paired segments: K updates per arm from the same checkpoint, each arm sampling its own rollouts from its
own (diverging) policy with common random numbers -- step k of every arm draws the same prompts and the
same sampling seed, and the AdamW state the checkpoint holds -- and J after each update. While the arms'
policies stay close they draw mostly the same samples; ``shared`` counts how many they still share,
which is how fast the pairing decays with K. Where the per-update effect and the end-to-end one part
(compounding, collapse), the segment shows it step by step."""

from __future__ import annotations

from typing import Any

from bench.engine.exact import exact_objective
from bench.paired.batches import row_hashes, stream_seed
from bench.paired.plan import Arm
from bench.paired.update import Workspace, draw, rl_step


def segment(ws: Workspace, arms: list[Arm], index: int, steps: int) -> list[dict[str, Any]]:
    """Segment ``index`` of the checkpoint: ``steps`` updates per arm; one record per arm and step, with
    the hashes of the samples it trained on (to count the samples two arms share)."""
    seed = ws.seed("segment", index)
    out = []
    for arm in arms:
        ws.reset()
        opt = ws.optimization(arm)
        for k in range(1, steps + 1):
            step_seed = stream_seed(seed, k)
            _, batch = draw(ws, arm, ws.sampler(ws.scratch, arm.cfg, step_seed, shared=False), step_seed)
            stats = rl_step(ws, arm, batch, opt, stream_seed(step_seed, "update"))
            j, _ = exact_objective(ws.scratch, ws.j_completions, ws.temperature)
            out.append(
                {
                    **ws.checkpoint.info(),
                    "segment": index,
                    "label": arm.label,
                    "lr": arm.lr,
                    "k": k,
                    "j_before": ws.j0,
                    "j": j,
                    "dj": 100 * (j - ws.j0),
                    "skipped": stats["train/skipped_updates"],
                    "rows": row_hashes(batch),
                }
            )
    return out


def shared_fraction(a: list[int], b: list[int]) -> float:
    """The fraction of samples two arms' batches share (as multisets of (prompt, completion) hashes)."""
    from collections import Counter

    common = Counter(a) & Counter(b)
    return sum(common.values()) / max(len(a), len(b), 1)
