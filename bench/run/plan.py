"""What a run will need, built without its weights: its memory plan.

``memory_plan(cfg)`` goes as far as a real run does before the first forward: it resolves the method and
tasks, loads the tasks' data files, builds the policy's module tree on the ``meta`` device (the
Hub architecture from :mod:`bench.models.hub_archs`, or the tiny config), wraps it with LoRA and activation
checkpointing as configured, constructs the LightningModule, the data module and the Lightning
strategy. What it cannot do without weights or a GPU is load the weights and start vLLM.

It also estimates the memory each training process holds: the weights, the gradients and AdamW's
two moments of the trainable parameters (in the weights' dtype for full fine-tuning, fp32 for LoRA
adapters), the frozen reference copy when the method needs one, the GPU share given to vLLM, and
the activations one micro-batch of the update keeps for its backward (:func:`activation_gb`: the
``rl.micro_batch_tokens`` budget, or the process's whole minibatch when it is 0). FSDP's FULL_SHARD
divides the weight, gradient and optimizer terms by the number of processes, and adds the whole
policy in the compute dtype, which a run gathers once per RL step. Not counted: the KV
cache of HF generation (vLLM's is inside its share) and the allocator's fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.config import RunConfig
from bench.engine.lm_head import chunk_tokens

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PROMPT_TOKENS = 512  # the prompt length the plan assumes (a chat-templated MATH or code prompt: 100-400)


@dataclass
class MemoryPlan:
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
    activations_gb: float = 0.0
    micro_batch_tokens: int = 0  # the padded tokens of one micro-batch the activations are counted for
    split: bool = False  # whether rl.micro_batch_tokens sets them (else: the whole minibatch)

    @property
    def static_gb(self) -> float:
        """Memory per process before activations: weights, optimizer state, and the larger of the
        gradients and vLLM's share when vLLM sleeps through the update (the gradients are freed
        before the next rollout), else both."""
        if self.vllm_sleeps:
            return self.weights_gb + self.optimizer_gb + max(self.grads_gb, self.vllm_gb)
        return self.weights_gb + self.grads_gb + self.optimizer_gb + self.vllm_gb

    @property
    def total_gb(self) -> float:
        """Memory per process at the peak of the update: the static terms and one micro-batch's activations."""
        return self.static_gb + self.activations_gb

    def line(self) -> str:
        batch = "micro-batches of" if self.split else "the whole minibatch,"
        return (
            f"{self.params / 1e9:.2f}B params ({self.trainable / 1e6:,.1f}M trainable), {self.strategy} x "
            f"{self.processes}: {self.total_gb:.1f} GB per process (weights {self.weights_gb:.1f}, grads "
            f"{self.grads_gb:.1f}, AdamW {self.optimizer_gb:.1f}, vLLM {self.vllm_gb:.1f}, activations "
            f"{self.activations_gb:.1f} at {batch} {self.micro_batch_tokens:,} tokens)"
        )


def activation_gb(
    config, tokens: int, completion_tokens: int, dtype_bytes: int, checkpointing: bool, chunk_elements: int = 0
) -> float:
    """GB of activations a forward of ``tokens`` tokens (``completion_tokens`` of them completions)
    keeps for its backward, for a decoder of ``config``'s shape (hidden H, MLP width I, L layers,
    key/value width K, vocabulary V).

    Per token and layer, 8H + 2K + 4I values: the two norms' inputs and outputs, the query, key and
    value projections, the attention output and o_proj's output, the MLP's gate, up, activation and
    product (attention itself is a fused kernel: nothing per pair of tokens); Qwen3's query and key
    norms keep 2Q + 2K more (Q: the query width); and 2H for the final norm. With activation
    checkpointing, L x H (each layer's input) plus one layer's worth, recomputed in the backward.
    The logits are taken only at completion positions: their float32 copy that the log-softmax's
    backward keeps, its gradient, and in bfloat16 the gradient cast back (V x 10 bytes; 8 in
    float32), which dominates for long completions and a 150k vocabulary. Where they exceed
    ``chunk_elements`` (> 0: ``rl.lm_head_chunk_elements``), the head runs in chunks
    (bench.engine.lm_head) and keeps no logits: one chunk's float32 logits, their softmax and their
    gradient exist at a time (12 bytes an element), beside the completion positions' hidden states."""
    H, I, L, V = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    K = heads * (getattr(config, "head_dim", None) or H // config.num_attention_heads)
    Q = config.num_attention_heads * (getattr(config, "head_dim", None) or H // config.num_attention_heads)
    per_layer = 8 * H + 2 * K + 4 * I + (2 * Q + 2 * K if config.model_type.startswith("qwen3") else 0)
    values = (L * H + per_layer if checkpointing else L * per_layer) + 2 * H
    logits = 8 + (dtype_bytes if dtype_bytes != 4 else 0)  # float32 copy kept, its gradient, the cast's
    chunk = chunk_tokens(completion_tokens, V, chunk_elements)
    head = chunk * V * 12 + completion_tokens * H * dtype_bytes if chunk else completion_tokens * V * logits
    return (tokens * values * dtype_bytes + head) / 1e9


def meta_policy(cfg: RunConfig):
    """The policy of ``cfg`` on the meta device, and a tokenizer of its vocabulary size."""
    import torch

    from bench.models.hub_archs import filler_tokenizer, meta_model
    from bench.models.policy import TINY_SIZES, char_tokenizer, tiny_config

    if cfg.model.name in TINY_SIZES:
        tokenizer = char_tokenizer()
        from transformers import Qwen3ForCausalLM

        with torch.device("meta"):
            model = Qwen3ForCausalLM(tiny_config(cfg.model.name, len(tokenizer))).to(getattr(torch, cfg.model.dtype))
        return model, tokenizer
    model = meta_model(cfg.model.name, cfg.model.dtype)
    return model, filler_tokenizer(model.config.vocab_size)


def memory_plan(cfg: RunConfig, gpu_gb: float = 80.0, load_data: bool = True) -> MemoryPlan:
    """Build everything of a run short of its weights (see the module docstring) and estimate its
    memory per process. ``gpu_gb`` sizes vLLM's share (rollout.gpu_memory_utilization of a GPU);
    ``load_data=False`` skips reading the tasks' data (when another run of the same tasks did)."""
    from bench.engine.rollout import HFRolloutEngine
    from bench.models.policy import num_parameters
    from bench.run.build import build_data, build_module, prepare
    from bench.run.resolve import resolve
    from bench.run.strategy import make_strategy

    r, lora = resolve(cfg), cfg.model.lora
    policy, tokenizer = meta_policy(cfg)
    params = num_parameters(policy)
    policy, ref = prepare(cfg, r, policy)  # as a run does: checkpointing, LoRA, a reference (meta: no memory)
    trainable = num_parameters(policy, trainable=True)
    build_module(cfg, r, policy, tokenizer, ref, engine=HFRolloutEngine(policy, tokenizer))
    data = build_data(cfg, r)
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
    rl = cfg.rl
    length = PROMPT_TOKENS + rl.sampling.max_new_tokens
    whole = length * max(1, rl.prompts_per_step * rl.group_size // (rl.minibatches * t.world_size))
    tokens = min(rl.micro_batch_tokens or whole, whole)  # a budget above the minibatch splits nothing
    rows = max(1, tokens // length)  # whole rows of the longest length fit in the budget
    compute = 2 if cfg.precision != "32-true" else w  # bf16 autocast computes in bfloat16
    config = getattr(policy, "config", None) or policy.get_base_model().config
    act = activation_gb(
        config,
        rows * length,
        rows * rl.sampling.max_new_tokens,
        compute,
        cfg.model.gradient_checkpointing,
        rl.lm_head_chunk_elements,
    )
    # FSDP gathers the whole policy once per RL step (rollout, scoring and update run on it), in the
    # compute dtype, beside the shards (bench.engine.sharding.ShardPlan)
    gathered = params * compute / gb if shard > 1 else 0.0
    return MemoryPlan(
        params=params,
        trainable=trainable,
        lora_rank=lora.rank,
        weights_gb=weights / shard + gathered,
        grads_gb=grads / shard,
        optimizer_gb=optimizer / shard,
        vllm_gb=vllm,
        strategy=strategy if isinstance(strategy, str) else type(strategy).__name__,
        processes=cfg.trainer.world_size,
        vllm_sleeps=bool(vllm and cfg.rollout.sleep),
        activations_gb=act,
        micro_batch_tokens=tokens,
        split=tokens < whole,
    )
