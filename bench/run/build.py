"""From a resolved run config to what trains: the policy prepared for training (checkpointed per
layer, under LoRA) with its reference, the :class:`RLVRModule`, its data and the trainer. One builder
for ``creditbench train`` (:mod:`bench.run.train`), ``creditbench plan`` (:mod:`bench.run.plan`, on
the meta device) and the scripts that train a config."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.config import RunConfig
from bench.run.strategy import make_strategy, shard_plan

if TYPE_CHECKING:
    from bench.run.resolve import Resolved


def prepare(cfg: RunConfig, r: Resolved, policy) -> tuple[Any, Any]:
    """(policy, reference or None) for training: activation checkpointing per decoder layer (under
    FSDP each layer is also one FSDP unit), the LoRA adapter (whose reference is the base with the
    adapter disabled: no copy), else a frozen copy where the method needs a reference."""
    from bench.engine.scoring import REFERENCE_NEEDS
    from bench.models.policy import add_lora, enable_gradient_checkpointing

    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    lora = cfg.model.lora
    if lora.rank > 0:
        return add_lora(policy, lora.rank, lora.alpha, lora.dropout, lora.targets), None
    return policy, copy.deepcopy(policy) if r.method.required & REFERENCE_NEEDS else None


def build_module(cfg: RunConfig, r: Resolved, policy, tokenizer, ref, engine=None):
    """The RLVRModule of ``cfg`` (its rollout engine: ``engine``, else the one cfg.rollout names),
    with its FSDP shard plan where the strategy is FSDP."""
    from bench.engine.engines import make_engine
    from bench.engine.module import RLVRModule

    module = RLVRModule(
        policy,
        tokenizer,
        r.method,
        r.task,
        cfg.task.name,
        cfg.rl,
        cfg.eval,
        ref_policy=ref,
        eval_tasks=r.eval_tasks,
        engine=engine if engine is not None else make_engine(cfg.rollout, policy, tokenizer, cfg.seed),
    )
    module.shard_plan = shard_plan(cfg)  # FSDP: configure_model shards the policy (and the reference) with it
    return module


def build_data(cfg: RunConfig, r: Resolved):
    """The run's PromptDataModule: the training prompts, each process's share, and the eval sets."""
    from bench.engine.data import PromptDataModule

    return PromptDataModule(r.task, cfg.rl.prompts_per_step, cfg.eval, cfg.seed, eval_tasks=r.eval_tasks)


def build_trainer(cfg: RunConfig, logger, ckpt_dir: Path | None, progress: bool):
    """The Lightning Trainer of a run: its strategy and precision, step progress and (with
    checkpoint.every) the run's checkpoints; the module decides when the run stops."""
    import lightning as L

    from bench.engine.checkpoint import RunCheckpoint
    from bench.engine.progress import rl_steps, rl_total, step_progress

    callbacks = [step_progress("RL", rl_total(cfg.rl), rl_steps, bar=progress)]  # real totals (bench.engine.progress)
    callbacks += [] if ckpt_dir is None else [RunCheckpoint(ckpt_dir, cfg.checkpoint.every)]
    return L.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=cfg.trainer.devices,
        num_nodes=cfg.trainer.num_nodes,
        strategy=make_strategy(cfg),
        precision=cfg.precision,
        logger=logger,
        callbacks=callbacks,
        max_steps=-1,
        max_epochs=-1,  # the module stops after rl.steps RL steps (or its budget)
        val_check_interval=1,  # the module decides after each step whether an eval follows (eval_due)
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        use_distributed_sampler=False,  # PromptDataModule gives each process its share of the global batch
    )
