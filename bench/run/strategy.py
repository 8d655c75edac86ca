"""Which engine, strategy and precision combinations a run can use (refused before any work), and
the Lightning strategy a run's ``trainer`` settings name: DDP, or FSDP2 (``fully_shard``) through
Lightning's ModelParallelStrategy, with the :class:`bench.engine.sharding.ShardPlan` the module applies."""

from __future__ import annotations

import functools

from bench.config import RunConfig
from bench.core import check


def check_scale(cfg: RunConfig) -> None:
    """The engine, strategy and precision combinations that cannot work, refused before any work."""
    t, world = cfg.trainer, cfg.trainer.world_size
    check(
        cfg.rl.prompts_per_step % world == 0,
        f"rl.prompts_per_step ({cfg.rl.prompts_per_step}) must be divisible by the number of processes "
        f"(trainer.devices x trainer.num_nodes = {world}): each process rolls out whole groups",
    )
    if world > 1:
        check(
            t.strategy in ("ddp", "fsdp"),
            f"trainer.devices x trainer.num_nodes = {world} needs trainer.strategy ddp or fsdp, got {t.strategy!r}",
        )
        check(
            cfg.eval.num_problems >= world,
            f"eval.num_problems ({cfg.eval.num_problems}) must be at least the "
            f"number of processes ({world}): each process evaluates its share of the problems",
        )
    if cfg.model.dtype != "float32" and cfg.model.lora.rank == 0:
        import warnings

        warnings.warn(
            f"model.dtype {cfg.model.dtype} with full fine-tuning keeps AdamW's state and updates in "
            f"{cfg.model.dtype}: updates much smaller than the weights round away (at lr {cfg.rl.lr:g}). "
            "Prefer model.dtype float32 with precision bf16-mixed",
            stacklevel=2,
        )
    if cfg.rollout.engine == "vllm":
        check(
            t.strategy != "fsdp",
            "rollout.engine vllm with trainer.strategy fsdp is not supported "
            "(the full weights are not on one process); use rollout.engine hf",
        )
        check(
            world == 1,
            f"rollout.engine vllm runs in one training process (vLLM in-process, with its own "
            f"distributed group), got trainer.devices x trainer.num_nodes = {world}; use rollout.engine hf",
        )
    if t.strategy == "fsdp":
        check(world >= 2, f"trainer.strategy fsdp needs trainer.devices x trainer.num_nodes >= 2, got {world}")
        check(
            t.fsdp_sharding != "NO_SHARD",
            "trainer.fsdp_sharding NO_SHARD shards nothing: use trainer.strategy ddp "
            "(or fsdp_sharding FULL_SHARD, SHARD_GRAD_OP or HYBRID_SHARD)",
        )


def make_strategy(cfg: RunConfig):
    """The Lightning strategy of ``cfg.trainer``: "auto", DDP, or FSDP2 (both gloo on CPU, NCCL on GPU);
    under FSDP the module shards the policy itself (configure_model, by :func:`shard_plan`)."""
    t = cfg.trainer
    if t.strategy == "ddp":
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(process_group_backend="gloo" if t.accelerator == "cpu" else None)
    if t.strategy == "fsdp":
        hybrid = t.fsdp_sharding == "HYBRID_SHARD"
        return fsdp2_strategy()(
            # the mesh ShardPlan shards over: every process, or (HYBRID_SHARD) nodes x devices
            data_parallel_size=t.num_nodes if hybrid else t.world_size,
            tensor_parallel_size=t.devices if hybrid else 1,
            save_distributed_checkpoint=False,  # one last.ckpt file, written by the first process
            process_group_backend="gloo" if t.accelerator == "cpu" else None,
        )
    return "auto"


def shard_plan(cfg: RunConfig):
    """How the module shards the policy under trainer.strategy fsdp (None for any other strategy):
    each decoder layer one FSDP2 unit, FULL_SHARD freeing a layer's gathered weights after its
    forward, SHARD_GRAD_OP keeping them to the backward, bf16-mixed gathering in bfloat16."""
    t = cfg.trainer
    if t.strategy != "fsdp":
        return None
    import torch

    from bench.engine.sharding import ShardPlan

    return ShardPlan(
        layers=tuple(decoder_layer_classes(cfg.model.name)),
        reshard_after_forward=t.fsdp_sharding != "SHARD_GRAD_OP",
        hybrid=t.fsdp_sharding == "HYBRID_SHARD",
        param_dtype=torch.bfloat16 if cfg.precision == "bf16-mixed" else None,
    )


@functools.cache
def fsdp2_strategy() -> type:
    """Lightning's ModelParallelStrategy (FSDP2; the module's configure_model shards), whose resume first
    checks that the checkpoint fits the model (bench.engine.checkpoint.check_fits: one line, before any
    weight is loaded). Built on first use: importing Lightning costs seconds a config check does not need."""
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy

    from bench.engine.checkpoint import check_fits

    class FSDP2Strategy(ModelParallelStrategy):
        def load_checkpoint(self, checkpoint_path, weights_only=None):
            # the run's own checkpoint (RNG states are numpy objects): the run asks fit for weights_only=False,
            # which Lightning 2.6 does not pass on to this call
            weights_only = False if weights_only is None else weights_only
            path = self.broadcast(checkpoint_path)
            state = torch.load(path, mmap=True, map_location="cpu", weights_only=weights_only)["state_dict"]
            check_fits(state, self.lightning_module)
            checkpoint = super().load_checkpoint(path, weights_only)
            checkpoint["state_dict"] = state  # the strategy took it out to load it; the module's hook reads it
            return checkpoint

    return FSDP2Strategy


def decoder_layer_classes(model_name: str) -> set[type]:
    """The decoder-layer class FSDP wraps one unit each: the one the model's architecture keeps
    whole when transformers splits it across devices (its ``_no_split_modules``)."""
    import sys

    from transformers import Qwen3Config
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from bench.models.hub_archs import architecture
    from bench.models.policy import TINY_SIZES

    # the tiny sizes are Qwen3 models (bench.models.policy.build_tiny); others have a known or Hub config
    config_class = Qwen3Config if model_name in TINY_SIZES else type(architecture(model_name))
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[config_class]
    module = sys.modules[model_class.__module__]
    return {getattr(module, name) for name in model_class._no_split_modules}
