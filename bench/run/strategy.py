"""Which engine, strategy and precision combinations a run can use (refused before any work), and
the Lightning strategy a run's ``trainer`` settings name."""

from __future__ import annotations

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
    if t.strategy == "fsdp":
        check(t.accelerator != "cpu", "trainer.strategy fsdp needs GPUs (trainer.accelerator gpu); use ddp on CPU")
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


def make_strategy(cfg: RunConfig):
    """The Lightning strategy of ``cfg.trainer``: "auto", DDP (gloo on CPU, NCCL on GPU), or FSDP
    wrapping each decoder layer (with activation checkpointing there when the model asks for it)."""
    t = cfg.trainer
    if t.strategy == "ddp":
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(process_group_backend="gloo" if t.accelerator == "cpu" else None)
    if t.strategy == "fsdp":
        from lightning.pytorch.strategies import FSDPStrategy

        layers = decoder_layer_classes(cfg.model.name)
        return FSDPStrategy(
            auto_wrap_policy=layers,
            sharding_strategy=t.fsdp_sharding,
            activation_checkpointing_policy=layers if cfg.model.gradient_checkpointing else None,
            use_orig_params=True,
        )  # LoRA: frozen and trainable parameters share wrapped modules
    return "auto"


def decoder_layer_classes(model_name: str) -> set[type]:
    """The decoder-layer class FSDP wraps one unit each: the one the model's architecture keeps
    whole when transformers splits it across devices (its ``_no_split_modules``)."""
    import sys

    from transformers import Qwen3Config
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    from bench.engine.policy import TINY_SIZES
    from bench.run.hub_archs import architecture

    # the tiny sizes are Qwen3 models (bench.engine.policy.build_tiny); others have a known or Hub config
    config_class = Qwen3Config if model_name in TINY_SIZES else type(architecture(model_name))
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[config_class]
    module = sys.modules[model_class.__module__]
    return {getattr(module, name) for name in model_class._no_split_modules}
