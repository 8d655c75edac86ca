"""Runs the RL module in W CPU processes under Lightning's DDP strategy on gloo (W = 1: the
single-process reference), for tests/engine/test_ddp.py
(and bench.perf.fsdp's one-process reference). Lightning's launcher starts the other ranks by
running this script again with the same arguments, so it is a script, not a pytest test.

    python bench/perf/workers/ddp.py update OUT --devices W
        For each case of CASES, the module's real scoring and update (RLVRModule.score_batch and
        .update) of one fixed global batch, each process holding its share of the groups; rank 0
        saves the statistics (their mean over processes, as training_step logs them) and the
        gradients the update left on the parameters (after DDP's all-reduce). Each case runs
        twice: fused (key ``case``), and with a separate scoring pass and the update split into
        micro-batches of at most MICRO_BATCH_TOKENS tokens (key ``case@split``).

    python bench/perf/workers/ddp.py train OUT --devices W
        A short real run (rollouts, 2 PPO epochs x 2 minibatches, a sample budget, greedy eval)
        of a tiny random policy; rank 0 saves what every process saw and ended with.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository root

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from bench.config import (  # noqa: E402
    EvalConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,  # noqa: E402
)
from bench.core import Outcome, RolloutBatch  # noqa: E402
from bench.distributed import gather_objects, mean_over_processes, rank  # noqa: E402
from bench.engine import scoring  # noqa: E402
from bench.engine.data import PromptDataModule  # noqa: E402
from bench.engine.module import RLVRModule  # noqa: E402
from bench.models.policy import build_tiny, char_tokenizer  # noqa: E402
from bench.registry import METHODS, TASKS  # noqa: E402
from bench.run.strategy import make_strategy  # noqa: E402

# name -> (method, options): one per aggregation, and the 80/20 rule's batch-wide entropy quantile
CASES = {
    "grpo": ("grpo", {"kl_coef": 0.04}),  # seq-mean-token-mean, with the KL term to a different reference
    "dapo": ("dapo", {}),  # token-mean
    "dr_grpo": ("dr_grpo", {}),  # seq-mean-token-sum-norm
    "entropy_top": ("entropy_top", {"denominator": "selected"}),  # top-k per minibatch, mean over it
}
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


def trainer(devices: int, **kwargs) -> L.Trainer:
    cfg = RunConfig()
    cfg.trainer.accelerator, cfg.trainer.devices = "cpu", devices
    cfg.trainer.strategy = "ddp" if devices > 1 else "auto"
    return L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=make_strategy(cfg),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        **kwargs,
    )


def update_case(case: str, devices: int, policy=None, micro_batch_tokens: int = 0) -> dict:
    """This process's result of CASES[case] on the fixed batch (all of it in one process, its share
    of the groups in each of 2), for the tiny policy of seed 0 or ``policy``; fused, or with
    ``micro_batch_tokens`` a scoring pass and the update in micro-batches of that budget (a budget
    above every share's tokens: a scoring pass and no split)."""
    tok = char_tokenizer()
    batch = global_batch(tok)
    shares = [batch] if devices == 1 else [share(batch, groups) for groups in SHARES]
    name, options = CASES[case]
    method_cls = METHODS.get(name)
    method = method_cls(method_cls.Config(**options))
    policy = policy if policy is not None else build_tiny("tiny-500k", seed=0)[0]
    # a reference unlike the policy, so that the KL term has a gradient
    ref = build_tiny("tiny-500k", seed=1)[0] if method.config.kl_coef > 0 else None
    rl = RLConfig(prompts_per_step=GROUPS, group_size=G, lr=1e-3, grad_clip=0.0, micro_batch_tokens=micro_batch_tokens)
    module = FixedBatchUpdate(
        policy, tok, method, TASKS.get("arithmetic")(), "arithmetic", rl, EvalConfig(), ref_policy=ref, shares=shares
    )
    trainer(devices, max_steps=1).fit(module, train_dataloaders=DataLoader([0], collate_fn=lambda rows: rows))
    return module.result


def update(out: Path, devices: int) -> None:
    results = {case: update_case(case, devices) for case in CASES}
    results |= {f"{case}@split": update_case(case, devices, micro_batch_tokens=MICRO_BATCH_TOKENS) for case in CASES}
    if rank() == 0:
        torch.save(results, out)


GRPO = METHODS.get("grpo")


class EveryTokenUp(GRPO):
    """GRPO's loss with credit +1 on every valid token: a random policy earns no reward, so this
    makes the update move the weights (which the processes must then agree on)."""

    def credit(self, batch):
        return batch.completion_mask.float()


class HasDigit:
    """The arithmetic task, graded "correct iff the completion contains a digit": a random policy
    then has per-problem results that differ, which the eval comparison needs."""

    def __init__(self):
        self.inner = TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=64, eval_size=16))

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def verify(self, completions, rows, details=True):
        hits = [any(ch.isdigit() for ch in c) for c in completions]
        return [Outcome(float(h), h, parsed=c, correct_flexible=h) for c, h in zip(completions, hits)]


class Record(L.Callback):
    """The prompts of every training step on this process and its sampling seed."""

    def __init__(self):
        self.prompts, self.seed = [], None

    def on_train_start(self, trainer, module):
        self.seed = torch.initial_seed()

    def on_train_batch_start(self, trainer, module, rows, batch_idx):
        self.prompts.append([r["question"] for r in rows])


def train(out: Path, devices: int) -> None:
    policy, tok = build_tiny("tiny-500k", seed=0)
    with torch.no_grad():  # larger random weights: greedy completions that differ from prompt to prompt
        for w in policy.parameters():
            if w.dim() == 2:
                w.mul_(5.0)
    task = HasDigit()
    rl = RLConfig(
        steps=4,
        prompts_per_step=4,
        group_size=4,
        ppo_epochs=2,
        minibatches=2,
        lr=1e-3,
        budget_samples=32,
        sampling=SamplingConfig(max_new_tokens=8),
    )
    ev = EvalConfig(
        every=100,
        n=1,
        k=[1],
        num_problems=7,
        batch_problems=1,  # 1: no padding, any split scores alike
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=8),
    )
    module = RLVRModule(policy, tok, EveryTokenUp(GRPO.Config(kl_coef=0.0)), task, "arithmetic", rl, ev)
    data = PromptDataModule(task, rl.prompts_per_step, ev, seed=0)
    record = Record()
    t = trainer(
        devices,
        max_steps=rl.steps * rl.ppo_epochs * rl.minibatches,
        max_epochs=-1,
        callbacks=[record],
        num_sanity_val_steps=0,
    )
    t.validate(module, datamodule=data, verbose=False)
    t.fit(module, datamodule=data)
    weights = torch.cat([p.detach().flatten() for p in policy.parameters()])
    seen = gather_objects(
        {
            "prompts": record.prompts,
            "seed": record.seed,
            "weights": weights,
            "rl_step": module.rl_step,
            "samples": module.samples,
            "tokens": module.tokens,
            "global_step": t.global_step,
            "eval": module.eval_history,
        }
    )
    if rank() == 0:
        torch.save(seen, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["update", "train"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--devices", type=int, default=2)
    a = parser.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every process and in the reference
    (update if a.mode == "update" else train)(a.out, a.devices)
