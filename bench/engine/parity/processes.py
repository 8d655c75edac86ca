"""The Lightning trainer of the parity runs (bench.engine.parity): W CPU processes on gloo under DDP
or FSDP2 (Lightning's ModelParallelStrategy over every process), and the shard plan FSDP applies to
the tiny policy (each decoder layer one unit). They are the strategy and plan a run's ``trainer``
settings build (bench.run.strategy; tests/engine/test_fsdp.py holds them equal)."""

from __future__ import annotations

import lightning as L

from bench.engine.sharding import ShardPlan

STRATEGIES = ("ddp", "fsdp")


def lightning_strategy(name: str, devices: int):
    """The Lightning strategy of ``name`` on ``devices`` CPU processes ("auto" for one process)."""
    if devices == 1:
        return "auto"
    if name == "ddp":
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(process_group_backend="gloo")
    from lightning.pytorch.strategies import ModelParallelStrategy

    return ModelParallelStrategy(
        data_parallel_size=devices,
        tensor_parallel_size=1,
        save_distributed_checkpoint=False,  # one checkpoint file, written by the first process
        process_group_backend="gloo",
    )


def shard_plan() -> ShardPlan:
    """FSDP2's plan for the tiny policy (a Qwen3 model): each decoder layer one unit, FULL_SHARD, fp32."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    return ShardPlan(layers=(Qwen3DecoderLayer,))


def trainer(devices: int, strategy: str = "ddp", **kwargs) -> L.Trainer:
    """A Lightning trainer of ``devices`` CPU processes under ``strategy``, without logger,
    checkpoints, progress bar or distributed sampler (each process's data is its own)."""
    return L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy=lightning_strategy(strategy, devices),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        **kwargs,
    )
