"""What a run will need, built without its weights.

``plan(cfg)`` goes as far as a real run does before the first forward: it resolves the method and
tasks, loads the tasks' data files, builds the policy's module tree on the ``meta`` device (the
Hub architecture from :mod:`bench.run.hub_archs`, or the tiny config), wraps it with LoRA and activation
checkpointing as configured, constructs the LightningModule, the data module and the Lightning
strategy. What it cannot do without weights or a GPU is load the weights and start vLLM.

It also estimates the memory each training process holds before activations: the weights, the
gradients and AdamW's two moments of the trainable parameters (in the weights' dtype for full
fine-tuning, fp32 for LoRA adapters), the frozen reference copy when the method needs one, and the
GPU share given to vLLM. FSDP's FULL_SHARD divides the weight, gradient and optimizer terms by the number of
processes. The estimate is a floor: activations (which scale with micro-batch x length and are
cut by activation checkpointing) and the KV cache of HF generation come on top.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from bench.config import RunConfig

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class Plan:
    params: int
    trainable: int
    lora_rank: int
    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    vllm_gb: float
    strategy: str
    processes: int
    vllm_sleeps: bool = False

    @property
    def static_gb(self) -> float:
        """Memory per process before activations: weights, optimizer state, and the larger of the
        gradients and vLLM's share when vLLM sleeps through the update (the gradients are freed
        before the next rollout), else both."""
        if self.vllm_sleeps:
            return self.weights_gb + self.optimizer_gb + max(self.grads_gb, self.vllm_gb)
        return self.weights_gb + self.grads_gb + self.optimizer_gb + self.vllm_gb

    def line(self) -> str:
        return (
            f"{self.params / 1e9:.2f}B params ({self.trainable / 1e6:,.1f}M trainable), {self.strategy} x "
            f"{self.processes}: {self.static_gb:.1f} GB per process before activations (weights "
            f"{self.weights_gb:.1f}, grads {self.grads_gb:.1f}, AdamW {self.optimizer_gb:.1f}, vLLM {self.vllm_gb:.1f})"
        )


def meta_policy(cfg: RunConfig):
    """The policy of ``cfg`` on the meta device, and a tokenizer of its vocabulary size."""
    import torch

    from bench.engine.policy import TINY_SIZES, char_tokenizer, tiny_config
    from bench.run.hub_archs import filler_tokenizer, meta_model

    if cfg.model.name in TINY_SIZES:
        tokenizer = char_tokenizer()
        from transformers import Qwen3ForCausalLM

        with torch.device("meta"):
            model = Qwen3ForCausalLM(tiny_config(cfg.model.name, len(tokenizer))).to(getattr(torch, cfg.model.dtype))
        return model, tokenizer
    model = meta_model(cfg.model.name, cfg.model.dtype)
    return model, filler_tokenizer(model.config.vocab_size)


def plan(cfg: RunConfig, gpu_gb: float = 80.0, load_data: bool = True) -> Plan:
    """Build everything of a run short of its weights (see the module docstring) and estimate its
    memory per process. ``gpu_gb`` sizes vLLM's share (rollout.gpu_memory_utilization of a GPU);
    ``load_data=False`` skips reading the tasks' data (when another run of the same tasks did)."""
    from bench.engine.data import PromptDataModule
    from bench.engine.module import RLVRModule
    from bench.engine.policy import add_lora, enable_gradient_checkpointing, num_parameters
    from bench.engine.rollout import HFRolloutEngine
    from bench.engine.step import REFERENCE_NEEDS
    from bench.run.train import make_strategy, resolve

    r = resolve(cfg)
    policy, tokenizer = meta_policy(cfg)
    params = num_parameters(policy)
    if cfg.model.gradient_checkpointing and cfg.trainer.strategy != "fsdp":  # FSDP checkpoints its wrapped layers
        enable_gradient_checkpointing(policy)
    lora = cfg.model.lora
    ref = None
    if lora.rank > 0:
        policy = add_lora(policy, lora.rank, lora.alpha, lora.dropout, lora.targets)
    elif r.method.required & REFERENCE_NEEDS:
        ref = copy.deepcopy(policy)  # meta: no memory
    trainable = num_parameters(policy, trainable=True)
    RLVRModule(
        policy,
        tokenizer,
        r.method,
        r.task,
        cfg.task.name,
        cfg.rl,
        cfg.eval,
        ref_policy=ref,
        eval_tasks=r.eval_tasks,
        engine=HFRolloutEngine(policy, tokenizer),
    )
    data = PromptDataModule(r.task, cfg.rl.prompts_per_step, cfg.eval, cfg.seed, eval_tasks=r.eval_tasks)
    if load_data:
        data.setup("fit")  # reads every task's data files
    strategy = make_strategy(cfg)

    gb = 1e9
    w = BYTES[cfg.model.dtype]
    t = cfg.trainer
    shard = t.world_size if t.strategy == "fsdp" and t.fsdp_sharding != "NO_SHARD" else 1
    tw = 4 if lora.rank else w  # peft keeps adapters in fp32; full fine-tuning trains in the weights' dtype
    weights = (params * w + (trainable * 4 if lora.rank else 0) + (params * w if ref is not None else 0)) / gb
    grads, optimizer = trainable * tw / gb, 2 * trainable * tw / gb  # AdamW: two moments
    vllm = cfg.rollout.gpu_memory_utilization * gpu_gb if cfg.rollout.engine == "vllm" else 0.0
    return Plan(
        params,
        trainable,
        lora.rank,
        weights / shard,
        grads / shard,
        optimizer / shard,
        vllm,
        strategy if isinstance(strategy, str) else type(strategy).__name__,
        cfg.trainer.world_size,
        vllm_sleeps=bool(vllm and cfg.rollout.sleep),
    )
