"""Global statistics when training runs in several processes (Lightning's DDP or FSDP strategy).
How FSDP2 shards a policy is the engine's (:class:`bench.engine.sharding.ShardPlan`).

With W processes each one holds 1/W of the RL step's groups; whatever normalises by or ranks over
the batch (the aggregation's token and sequence counts, a batch-wide entropy quantile, the sample
and token counters of the budget, the eval results) must see the whole global batch. These
helpers give it: in one process, or inside :func:`local`, each is the identity, so the
single-process path runs exactly the same arithmetic with no communication.

``all_sum``, ``all_cat``, ``gather_objects``, ``mean_over_processes``, ``clip_grad_norm`` over sharded
gradients (and entering or leaving ``ShardPlan.gathered``) are collectives: every process must
call them, in the same order.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

_local_depth = 0


@contextlib.contextmanager
def local() -> Iterator[None]:
    """Within this block every helper acts as in a single process (for work one process does on
    its own, such as the credit map: there is nothing to gather and no one to gather from)."""
    global _local_depth
    _local_depth += 1
    try:
        yield
    finally:
        _local_depth -= 1


def _active() -> bool:
    return _local_depth == 0 and dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Number of training processes (1 without a process group)."""
    return dist.get_world_size() if _active() else 1


def rank() -> int:
    """This process's global rank (0 without a process group)."""
    return dist.get_rank() if _active() else 0


def all_sum(x: Tensor) -> Tensor:
    """The sum of ``x`` over all processes (a new tensor, without gradient)."""
    y = x.detach().clone()
    if world_size() > 1:
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
    return y


def all_cat(x: Tensor) -> Tensor:
    """Every process's 1-D ``x`` (lengths may differ) concatenated in rank order, without gradient."""
    x = x.detach().flatten()
    world = world_size()
    if world == 1:
        return x
    n = torch.tensor([x.numel()], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n)
    longest = int(max(int(s) for s in sizes))
    padded = torch.cat([x, x.new_zeros(longest - x.numel())])  # all_gather needs equal shapes
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(s)] for p, s in zip(parts, sizes)])


def gather_objects(obj: Any) -> list[Any]:
    """Every process's picklable ``obj``, in rank order (``[obj]`` in one process)."""
    world = world_size()
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def mean_over_processes(stats: dict[str, float], sums: tuple[str, ...] = ()) -> dict[str, float]:
    """Each statistic's mean over the processes that report it (its sum for the keys in ``sums``),
    so a per-process mean over equal shares of the batch becomes the global batch's mean."""
    parts = gather_objects(stats)
    if len(parts) == 1:
        return stats
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for p in parts for k in p):  # first-seen order
        values = [p[key] for p in parts if key in p]
        out[key] = float(sum(values)) if key in sums else float(sum(values) / len(values))
    return out


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` for gradients that may be FSDP shards (DTensors): the norm of
    the whole gradient, as a plain 0-d tensor equal on every process, and every gradient scaled by
    min(1, max_norm / (norm + 1e-6)) in place. Without sharded gradients it is torch's own function."""
    from torch.distributed.tensor import DTensor

    params = list(params)
    grads = [p.grad for p in params if p.grad is not None]
    sharded = [g for g in grads if isinstance(g, DTensor)]
    if not sharded:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    plain = [g for g in grads if not isinstance(g, DTensor)]
    # each shard's squared norm, summed over the mesh by DTensor's reduction (a replicated dimension
    # of a hybrid mesh is counted once); replicated plain gradients are the same on every process
    total = torch.nn.utils.get_total_norm(sharded, 2.0).full_tensor().float() ** 2
    if plain:
        total = total + torch.nn.utils.get_total_norm(plain, 2.0).float().to(total.device) ** 2
    norm = total.sqrt()
    if math.isfinite(max_norm):
        coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            (g.to_local() if isinstance(g, DTensor) else g).mul_(coef.to(g.dtype))
    return norm
