"""Runs the RL module in 2 CPU processes under FSDP2 (trainer.strategy fsdp: Lightning's
ModelParallelStrategy on gloo, each decoder layer one fully_shard unit), for tests/engine/test_fsdp.py
and bench.perf.fsdp.
Lightning's launcher starts the other rank by running this script again with the same arguments.

    python bench/perf/workers/fsdp.py update OUT [--cases CASE ...]
        For each case of bench/perf/workers/ddp.py's CASES (fused, and with a scoring pass and the update in
        micro-batches: 3 on one process, 6 on the other) and a LoRA case: the module's real scoring
        and update of the fixed global batch, each process holding its share of the groups. Rank 0
        saves the statistics and the whole gradients (gathered from the shards) the update left.

    python bench/perf/workers/fsdp.py train OUT [--lora]
        A short real run (rollouts of different lengths on each process, 2 PPO epochs x 2 minibatches,
        a token budget per micro-batch, greedy eval split 3 + 4 problems); rank 0 saves what every
        process ended with, and the saved policy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # run as a script: the repository root

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from bench.config import EvalConfig, RLConfig, RunConfig, SamplingConfig  # noqa: E402
from bench.distributed import rank  # noqa: E402
from bench.engine.data import PromptDataModule  # noqa: E402
from bench.engine.module import RLVRModule  # noqa: E402
from bench.models.policy import (  # noqa: E402
    add_lora,
    build_tiny,
    char_tokenizer,
    full_state,
    load_policy,
    save_policy,
)
from bench.perf.workers import ddp as w  # noqa: E402
from bench.registry import METHODS, TASKS  # noqa: E402
from bench.run.strategy import make_strategy, shard_plan  # noqa: E402

LORA_CASE = "grpo@lora"  # GRPO with the KL term to the adapter-off reference, under a rank-4 adapter


def config(lora: bool = False) -> RunConfig:
    cfg = RunConfig()
    cfg.model.name = "tiny-500k"
    cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.strategy = "cpu", 2, "fsdp"
    cfg.model.lora.rank = 4 if lora else 0
    return cfg


def trainer(**kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=make_strategy(config()),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        **kwargs,
    )


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


class ShardedFixedBatchUpdate(w.FixedBatchUpdate):
    """The DDP worker's fixed-batch update inside the step's gathered block (as training_step runs it);
    the gradients are read afterwards from the shards, gathered whole."""

    def training_step(self, rows, batch_idx):
        with self._whole(self.policy):
            super().training_step(rows, batch_idx)
        self.result["grads"] = {
            n: p.grad.full_tensor().clone() for n, p in self.policy.named_parameters() if p.grad is not None
        }


def update_case(case: str, micro_batch_tokens: int = 0) -> dict:
    """This process's result of ``case`` on its share of the fixed batch, under FSDP."""
    tok = char_tokenizer()
    batch = w.global_batch(tok)
    shares = [w.share(batch, groups) for groups in w.SHARES]
    lora = case == LORA_CASE
    name, options = w.CASES["grpo" if lora else case]
    method = METHODS.get(name)(METHODS.get(name).Config(**options))
    policy = lora_policy() if lora else build_tiny("tiny-500k", seed=0)[0]
    ref = build_tiny("tiny-500k", seed=1)[0] if method.config.kl_coef > 0 and not lora else None
    rl = RLConfig(
        prompts_per_step=w.GROUPS, group_size=w.G, lr=1e-3, grad_clip=0.0, micro_batch_tokens=micro_batch_tokens
    )
    args = policy, tok, method, TASKS.get("arithmetic")(), "arithmetic", rl, EvalConfig()
    module = ShardedFixedBatchUpdate(*args, ref_policy=ref, shares=shares)
    module.shard_plan = shard_plan(config(lora))
    trainer(max_steps=1).fit(module, train_dataloaders=DataLoader([0], collate_fn=lambda rows: rows))
    return module.result


def update(out: Path, cases: list[str]) -> None:
    results = {case: update_case(case) for case in cases}
    results |= {f"{case}@split": update_case(case, micro_batch_tokens=w.MICRO_BATCH_TOKENS) for case in cases}
    if rank() == 0:
        torch.save(results, out)


def train(out: Path, lora: bool) -> None:
    policy, tok = build_tiny("tiny-500k", seed=0)
    with torch.no_grad():  # larger random weights: completions of many lengths, greedy answers that differ
        for p in policy.parameters():
            if p.dim() == 2:
                p.mul_(5.0)
    if lora:  # from a saved base, as a run's policy is: the saved adapter names it
        policy.save_pretrained(out.parent / "base")
        tok.save_pretrained(out.parent / "base")
        policy = add_lora(load_policy(out.parent / "base")[0], 4, 8.0, 0.0, ["all-linear"])
    task = w.HasDigit()
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
    ev = EvalConfig(
        every=100,
        n=1,
        k=[1],
        num_problems=7,
        batch_problems=1,
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=8),
    )
    method = METHODS.get("grpo")(METHODS.get("grpo").Config(kl_coef=0.04))  # the KL term: the reference's passes too
    ref = None if lora else build_tiny("tiny-500k", seed=1)[0]
    module = RLVRModule(policy, tok, method, task, "arithmetic", rl, ev, ref_policy=ref)
    module.shard_plan = shard_plan(config(lora))
    data = PromptDataModule(task, rl.prompts_per_step, ev, seed=0)
    t = trainer(max_epochs=-1, max_steps=-1, num_sanity_val_steps=0)
    t.validate(module, datamodule=data, verbose=False)
    module.make_probe(list(data.eval_rows))
    before = {k: v.clone() for k, v in (full_state(module.policy) or {}).items()}
    t.fit(module, datamodule=data)
    after = full_state(module.policy)
    probe = module.credit_probe()
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["update", "train"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--cases", nargs="+", default=[*w.CASES, LORA_CASE], choices=[*w.CASES, LORA_CASE])
    a = parser.parse_args()
    torch.set_num_threads(1)  # the same arithmetic in every process and in the reference
    update(a.out, a.cases) if a.mode == "update" else train(a.out, a.lora)
