"""The short real runs of the parity checks (bench.engine.parity): a tiny random policy trained in
W processes under DDP (rank 0 saves what every process saw and ended with), or in 2 under FSDP2,
with or without LoRA (rank 0 saves the weights before and after, the eval, the credit map and
the saved policy)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from bench.config import EvalConfig, RLConfig, SamplingConfig
from bench.core import Outcome
from bench.distributed import gather_objects, rank
from bench.engine.data import PromptDataModule
from bench.engine.module import RLVRModule
from bench.engine.parity.processes import shard_plan, trainer
from bench.models.policy import add_lora, build_tiny, full_state, load_policy, save_policy
from bench.registry import METHODS, TASKS

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


def scaled_policy():
    """The tiny policy of seed 0 with its matrices x5: larger random weights give completions of many
    lengths and greedy completions (and answers) that differ from prompt to prompt."""
    policy, tok = build_tiny("tiny-500k", seed=0)
    with torch.no_grad():
        for w in policy.parameters():
            if w.dim() == 2:
                w.mul_(5.0)
    return policy, tok


def greedy_eval() -> EvalConfig:
    """A greedy eval of 7 problems one at a time (no padding: any split between processes scores alike)."""
    return EvalConfig(
        every=100,
        n=1,
        k=[1],
        num_problems=7,
        batch_problems=1,
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=8),
    )


def train_ddp(out: Path, devices: int) -> None:
    """4 steps of rollouts, 2 PPO epochs x 2 minibatches and a 32-sample budget (it stops the run
    after 2), in ``devices`` DDP processes; rank 0 saves each process's prompts, sampling seed,
    weights, counters and eval history."""
    policy, tok = scaled_policy()
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
    ev = greedy_eval()
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


def train_fsdp(out: Path, lora: bool) -> None:
    """3 steps of GRPO with the KL term (rollouts of different lengths on each process, 2 PPO epochs
    x 2 minibatches, a token budget per micro-batch, greedy eval split 3 + 4 problems) in 2 FSDP
    processes, fully fine-tuned or (``lora``) under a rank-4 adapter on a saved base; rank 0 saves
    the weights before and after, the eval, the credit map and the saved policy's folder."""
    policy, tok = scaled_policy()
    if lora:  # from a saved base, as a run's policy is: the saved adapter names it
        policy.save_pretrained(out.parent / "base")
        tok.save_pretrained(out.parent / "base")
        policy = add_lora(load_policy(out.parent / "base")[0], 4, 8.0, 0.0, ["all-linear"])
    task = HasDigit()
    rl = RLConfig(
        steps=3,
        prompts_per_step=4,
        group_size=4,
        ppo_epochs=2,
        minibatches=2,
        lr=1e-2,
        micro_batch_tokens=60,  # micro-batches of 2-4 rollouts: a different number on each process
        sampling=SamplingConfig(max_new_tokens=12),
    )
    ev = greedy_eval()
    method = GRPO(GRPO.Config(kl_coef=0.04))  # the KL term: the reference's passes too
    ref = None if lora else build_tiny("tiny-500k", seed=1)[0]
    module = RLVRModule(policy, tok, method, task, "arithmetic", rl, ev, ref_policy=ref)
    module.shard_plan = shard_plan()
    data = PromptDataModule(task, rl.prompts_per_step, ev, seed=0)
    t = trainer(2, "fsdp", max_epochs=-1, max_steps=-1, num_sanity_val_steps=0)
    t.validate(module, datamodule=data, verbose=False)
    module.make_fixed_sets(list(data.eval_rows))
    before = {k: v.clone() for k, v in (full_state(module.policy) or {}).items()}
    t.fit(module, datamodule=data)
    after = full_state(module.policy)
    probe = module.measure_credit_map()
    if rank() == 0:
        policy_dir = save_policy(module.policy, tok, out.parent / "policy", after)
        torch.save(
            {
                "rl_step": module.rl_step,
                "samples": module.samples,
                "eval": module.eval_history,
                "before": before,
                "after": after,
                "trainable": [n for n, p in module.policy.named_parameters() if p.requires_grad],
                "probe": probe,
                "policy_dir": str(policy_dir),
            },
            out,
        )
