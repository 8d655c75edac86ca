"""The fixed global batch of the parity runs (bench.engine.parity), its unequal shares between 2
processes, the update cases (one per aggregation, and the 80/20 rule's batch-wide entropy quantile),
and the LoRA policy of the LoRA case."""

from __future__ import annotations

import torch

from bench.core import RolloutBatch
from bench.models.policy import add_lora, build_tiny

# name -> (method, options): one per aggregation, and the 80/20 rule's batch-wide entropy quantile
CASES = {
    "grpo": ("grpo", {"kl_coef": 0.04}),  # seq-mean-token-mean, with the KL term to a different reference
    "dapo": ("dapo", {}),  # token-mean
    "dr_grpo": ("dr_grpo", {}),  # seq-mean-token-sum-norm
    "entropy_top": ("entropy_top", {"denominator": "selected"}),  # top-k per minibatch, mean over it
}
LORA_CASE = "grpo@lora"  # GRPO with the KL term to the adapter-off reference, under a rank-4 adapter
GROUPS, G, P, T = 5, 4, 8, 12  # groups, completions per group, prompt and completion budget
SHARES = [range(0, 2), range(2, 5)]  # the groups of each of 2 processes: unequal rows and tokens
MICRO_BATCH_TOKENS = 40  # 2-3 rows a micro-batch: 3 micro-batches on one process, 6 on the other


def global_batch(tokenizer) -> RolloutBatch:
    """A fixed batch of GROUPS groups of G completions: left-padded prompts of 5-8 tokens; every
    group mixes correct and wrong answers; the first two groups' completions are short (2-5
    tokens) and the rest long (7-12, some truncated), so the processes' token counts differ."""
    g = torch.Generator().manual_seed(0)
    B, vocab, pad, eos = GROUPS * G, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id
    prompt_ids = torch.full((B, P), pad)
    prompt_mask = torch.zeros(B, P, dtype=torch.long)
    for group in range(GROUPS):
        n = int(torch.randint(5, P + 1, (1,), generator=g))
        tokens = torch.randint(3, vocab, (n,), generator=g)
        prompt_ids[group * G : (group + 1) * G, P - n :] = tokens
        prompt_mask[group * G : (group + 1) * G, P - n :] = 1
    short = torch.arange(B) < SHARES[0].stop * G
    lengths = torch.where(short, torch.randint(2, 6, (B,), generator=g), torch.randint(7, T + 1, (B,), generator=g))
    completion_ids = torch.randint(3, vocab, (B, T), generator=g)
    completion_mask = (torch.arange(T) < lengths[:, None]).long()
    truncated = lengths == T
    rows = torch.arange(B)
    completion_ids[rows[~truncated], lengths[~truncated] - 1] = eos
    completion_ids = completion_ids.masked_fill(completion_mask == 0, pad)
    correct = torch.rand(B, generator=g) < 0.5
    correct[0::G], correct[1::G] = True, False  # every group mixed
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group_ids=torch.arange(GROUPS).repeat_interleave(G),
        rewards=correct.float(),
        correct=correct,
        truncated=truncated,
        max_new_tokens=T,
    )


def share(batch: RolloutBatch, groups: range) -> RolloutBatch:
    """The rows of ``groups``, with group ids renumbered from 0 as a process's own batch has them."""
    sub = batch.select(torch.arange(groups.start * G, groups.stop * G))
    sub.group_ids = sub.group_ids - groups.start
    return sub


def shares(batch: RolloutBatch, devices: int) -> list[RolloutBatch]:
    """Each process's batch: the whole batch in one process, the groups of SHARES in each of 2."""
    return [batch] if devices == 1 else [share(batch, groups) for groups in SHARES]


def lora_policy():
    """The tiny policy of seed 0 under a rank-4 adapter whose B is not zero (an adapter that has
    trained a little), so that both of its matrices have a gradient."""
    policy = add_lora(build_tiny("tiny-500k", seed=0)[0], 4, 8.0, 0.0, ["all-linear"])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return policy
