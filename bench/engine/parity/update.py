"""The fixed-batch update of the parity runs (bench.engine.parity): for one case, the module's real
scoring and update (RLVRModule.score_batch and .update) of the fixed global batch, each of W
processes holding its share of the groups (W = 1: the whole batch, the single-process reference),
under DDP or FSDP2; the result is the statistics (their mean over processes, as training_step logs
them) and the whole gradients the update left on the parameters (after DDP's all-reduce; under FSDP
gathered from the shards)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from bench.config import EvalConfig, RLConfig
from bench.core import RolloutBatch
from bench.distributed import mean_over_processes, rank
from bench.engine import scoring
from bench.engine.module import RLVRModule
from bench.engine.parity.batch import CASES, GROUPS, LORA_CASE, MICRO_BATCH_TOKENS, G, global_batch, lora_policy, shares
from bench.engine.parity.processes import shard_plan, trainer
from bench.models.policy import build_tiny, char_tokenizer
from bench.registry import METHODS, TASKS


class FixedBatchUpdate(RLVRModule):
    """The module's scoring and update of this process's share of a fixed batch, in place of the
    rollouts of training_step; keeps the statistics and the gradients the update leaves."""

    def __init__(self, *args, shares: list[RolloutBatch], **kwargs):
        super().__init__(*args, **kwargs)
        self.shares = shares

    def training_step(self, rows, batch_idx):
        batch = self.shares[rank()]
        fused = self.rl.micro_batch_tokens == 0
        if not fused:  # scored unsplit, so every process starts from the same behaviour log-probs
            unsplit = replace(self.rl, micro_batch_tokens=0)
            scored = scoring.score_batch(self.policy, self.ref_policy, self.method, batch, rl=unsplit, fused=False)
        else:
            scored = self.score_batch(batch, fused=True)
        stats = mean_over_processes(self.update(batch, scored))
        grads = {n: p.grad.detach().clone() for n, p in self.policy.named_parameters() if p.grad is not None}
        self.result = {"stats": stats, "grads": grads}


class ShardedFixedBatchUpdate(FixedBatchUpdate):
    """The fixed-batch update inside the step's gathered block (as training_step runs it under FSDP);
    the gradients are read afterwards from the shards, gathered whole."""

    def training_step(self, rows, batch_idx):
        with self._whole(self.policy):
            super().training_step(rows, batch_idx)
        self.result["grads"] = {
            n: p.grad.full_tensor().clone() for n, p in self.policy.named_parameters() if p.grad is not None
        }


def update_case(
    case: str, devices: int = 1, policy=None, *, micro_batch_tokens: int = 0, strategy: str = "ddp"
) -> dict:
    """This process's result of ``case`` (a key of CASES, or LORA_CASE) on the fixed batch (all of it
    in one process, its share of the groups in each of 2), for the tiny policy of seed 0 (LORA_CASE:
    :func:`lora_policy`) or ``policy``; fused, or with ``micro_batch_tokens`` a scoring pass and the
    update in micro-batches of that budget (a budget above every share's tokens: a scoring pass and
    no split)."""
    tok = char_tokenizer()
    lora = case == LORA_CASE
    name, options = CASES["grpo" if lora else case]
    method_cls = METHODS.get(name)
    method = method_cls(method_cls.Config(**options))
    if policy is None:
        policy = lora_policy() if lora else build_tiny("tiny-500k", seed=0)[0]
    # a reference unlike the policy, so that the KL term has a gradient (under LoRA: the adapter-off pass)
    ref = build_tiny("tiny-500k", seed=1)[0] if method.config.kl_coef > 0 and not lora else None
    rl = RLConfig(prompts_per_step=GROUPS, group_size=G, lr=1e-3, grad_clip=0.0, micro_batch_tokens=micro_batch_tokens)
    module_cls = ShardedFixedBatchUpdate if strategy == "fsdp" else FixedBatchUpdate
    module = module_cls(
        policy,
        tok,
        method,
        TASKS.get("arithmetic")(),
        "arithmetic",
        rl,
        EvalConfig(),
        ref_policy=ref,
        shares=shares(global_batch(tok), devices),
    )
    if strategy == "fsdp":
        module.shard_plan = shard_plan()
    fit = trainer(devices, strategy, max_steps=1)
    fit.fit(module, train_dataloaders=DataLoader([0], collate_fn=lambda rows: rows))
    return module.result


def update(out: Path, cases: list[str], devices: int, strategy: str) -> None:
    """Each of ``cases`` fused (key ``case``), then each with a separate scoring pass and the update
    split into micro-batches of at most MICRO_BATCH_TOKENS tokens (key ``case@split``: 3 micro-batches
    on one process, 6 on the other); rank 0 saves the results to ``out``."""
    results = {case: update_case(case, devices, strategy=strategy) for case in cases}
    results |= {
        f"{case}@split": update_case(case, devices, micro_batch_tokens=MICRO_BATCH_TOKENS, strategy=strategy)
        for case in cases
    }
    if rank() == 0:
        torch.save(results, out)
