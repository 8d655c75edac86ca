"""Global statistics when training runs in several processes (Lightning's DDP strategy), and the
FSDP2 sharding of a policy (:class:`ShardPlan`, under Lightning's ModelParallelStrategy).

With W processes each one holds 1/W of the RL step's groups; whatever normalises by or ranks over
the batch (the aggregation's token and sequence counts, a batch-wide entropy quantile, the sample
and token counters of the budget, the eval results) must see the whole global batch. These
helpers give it: in one process, or inside :func:`local`, each is the identity, so the
single-process path runs exactly the same arithmetic with no communication.

``all_sum``, ``all_cat``, ``gather_objects``, ``mean_over_processes``, ``clip_grad_norm`` over sharded
gradients and entering or leaving :meth:`ShardPlan.gathered` are collectives: every process must
call them, in the same order.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

_local_depth = 0


@contextlib.contextmanager
def local() -> Iterator[None]:
    """Within this block every helper acts as in a single process (for work one process does on
    its own, such as the credit probe: there is nothing to gather and no one to gather from)."""
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


@dataclass(frozen=True)
class ShardPlan:
    """How FSDP2 (``torch.distributed.fsdp.fully_shard``) shards a policy: each decoder layer one unit,
    then the transformers model that holds them (the root every forward and ``generate`` passes
    through; under LoRA the peft wrapper's base model, frozen and trainable weights in one unit).

    Between RL steps each process keeps 1/W of the weights, gradients and AdamW state. Within a step
    the weights are gathered once (:meth:`gathered`) and kept whole: the processes generate
    completions of different lengths, split their minibatches into different numbers of
    micro-batches, and some work runs on one process alone, so an all-gather in every forward would
    leave processes waiting on each other. Gradients are still reduce-scattered (averaged) to their
    shards in the last backward of each optimizer step, and AdamW updates the shards."""

    layers: tuple[type, ...]
    """The module classes that become one FSDP unit each (the decoder layers)."""
    reshard_after_forward: bool = True
    """FULL_SHARD: a layer's gathered weights are freed after its forward outside a gathered block;
    False (SHARD_GRAD_OP) keeps them until the backward."""
    hybrid: bool = False
    """HYBRID_SHARD: shard within a node, replicate across nodes (the 2-D mesh nodes x devices)."""
    param_dtype: torch.dtype | None = None
    """bf16-mixed: gather and compute in bfloat16, reduce gradients in float32; None keeps the weights' dtype."""

    def apply(self, model, mesh) -> None:
        """Shard ``model`` in place over ``mesh`` (Lightning's device mesh: data_parallel x
        tensor_parallel); a model already sharded (validation, then fit) is left as it is."""
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        root = _root(model)
        if isinstance(root, FSDPModule):
            return
        mp = MixedPrecisionPolicy(
            param_dtype=self.param_dtype, reduce_dtype=torch.float32 if self.param_dtype else None
        )
        mesh = mesh if self.hybrid else mesh["data_parallel"]
        units = [m for m in root.modules() if isinstance(m, self.layers)]
        if not units:
            from bench.errors import CreditBenchError

            raise CreditBenchError(
                f"FSDP found no {' or '.join(c.__name__ for c in self.layers)} in {type(root).__name__} to shard"
            )
        for m in units:
            fully_shard(m, mesh=mesh, reshard_after_forward=self.reshard_after_forward, mp_policy=mp)
        fully_shard(root, mesh=mesh, mp_policy=mp)

    @contextlib.contextmanager
    def gathered(self, *models) -> Iterator[None]:
        """Within this block the sharded ``models`` are whole on every process: gathered once on
        entry, kept through every forward and backward (no collective but the gradients'
        reduce-scatter), freed on exit. A model already gathered by an enclosing block is left to it."""
        roots = {id(_root(m)) for m in models if m is not None}
        units = [u for m in models if m is not None for u in _units(m) if not getattr(u, "_gathered_whole", False)]
        for u in units:
            u.set_reshard_after_forward(False, recurse=False)
            u.set_reshard_after_backward(False, recurse=False)
            u.unshard()
            u._gathered_whole = True
        try:
            yield
        finally:
            for u in units:
                u.reshard()
                u._gathered_whole = False
                u.set_reshard_after_backward(True, recurse=False)
                # a root keeps its weights from forward to backward, as fully_shard does by default
                u.set_reshard_after_forward(self.reshard_after_forward and id(u) not in roots, recurse=False)

    def refresh(self, model) -> None:
        """After an optimizer step inside :meth:`gathered`: gather the updated shards again (the whole
        weights are a copy, which the step does not touch)."""
        for u in _units(model):
            if getattr(u, "_gathered_whole", False):
                u.reshard()
                u.unshard()

    @contextlib.contextmanager
    def no_sync(self, model) -> Iterator[None]:
        """A backward inside accumulates whole gradients locally, without the reduce-scatter."""
        root = _root(model)
        root.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            root.set_requires_gradient_sync(True)


def _root(model):
    """The transformers model under a peft wrapper, or ``model`` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _units(model) -> list:
    """The FSDP units of ``model``, the root first."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in _root(model).modules() if isinstance(m, FSDPModule)]
