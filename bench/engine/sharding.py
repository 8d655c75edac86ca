"""The FSDP2 sharding of a policy under Lightning's ModelParallelStrategy (:class:`ShardPlan`): which
modules are FSDP units, how a step gathers whole weights, and how micro-batches skip the
reduce-scatter. Entering or leaving :meth:`ShardPlan.gathered` is a collective: every process must,
in the same order (:mod:`bench.distributed`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch


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
