"""The typed core that methods and tasks plug into: the rollout batch, a verifier's Outcome, the
task contract (Task, TaskConfig and the opt-in to run model-written code) and the method contract.

Shapes: ``B`` completions (``G`` per prompt, grouped by ``group_ids``), ``T`` completion tokens
(right-padded), ``P`` prompt tokens (left-padded). Every per-token tensor a method sees or returns
is ``[B, T]`` and aligned with ``completion_ids``; masked positions carry no meaning.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from bench.errors import CreditBenchError

# What a method may ask the engine to compute for it (``Method.needs``).
NEEDS = frozenset(
    {"entropy", "ref_logprobs", "ref_entropy", "ref_kl", "hidden_residual", "hidden_residual_separate", "hidden_states"}
)
"""``hidden_residual_separate``: the adapter-on hidden states of ``hidden_residual`` come from their
own no-grad forward (as ARCA's official code), not from the training forward (they differ only
through dropout)."""


@dataclass
class RolloutBatch:
    """One RL step's rollouts, scored and verified. Optional tensors are filled on demand."""

    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P] 1 on real prompt tokens
    completion_ids: Tensor  # [B, T] right-padded
    completion_mask: Tensor  # [B, T] 1 on completion tokens up to and including the first eos
    group_ids: Tensor  # [B] long: which prompt of the step each completion answers
    rewards: Tensor  # [B] float
    correct: Tensor  # [B] bool
    truncated: Tensor  # [B] bool: no eos within max_new_tokens
    max_new_tokens: int
    old_logprobs: Tensor | None = None  # [B, T] behaviour policy log pi_old(y_t)
    entropy: Tensor | None = None  # [B, T] entropy of pi_old(. | y_<t) at the sampling temperature
    ref_logprobs: Tensor | None = None  # [B, T] reference policy log pi_ref(y_t)
    ref_entropy: Tensor | None = None  # [B, T] entropy of pi_ref(. | y_<t)
    ref_kl: Tensor | None = None  # [B, T] exact KL(pi_old(. | y_<t) || pi_ref(. | y_<t)) over the vocabulary
    hidden_residual: Tensor | None = None  # [B, T] ||h_adapter_on - h_adapter_off||_2 (last layer)
    hidden_states: Tensor | None = None  # [B, T, H] behaviour policy's last hidden state (what the LM head reads)
    extra: dict[str, Tensor] = field(default_factory=dict)  # per-row tensors ([B, ...]) a method adds
    prompts: list[str] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # the task row (problem) each completion answers

    @property
    def lengths(self) -> Tensor:  # [B]
        return self.completion_mask.sum(-1)

    @property
    def size(self) -> int:
        return self.completion_ids.shape[0]

    def select(self, index: Tensor) -> RolloutBatch:
        """The sub-batch at ``index`` (a [b] long tensor), e.g. a PPO minibatch."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                v = v[index]
            elif isinstance(v, list) and v:
                v = [v[i] for i in index.tolist()]
            elif isinstance(v, dict):
                v = {k: t[index] for k, t in v.items()}
            out[f.name] = v
        return RolloutBatch(**out)

    def to(self, device: torch.device | str) -> RolloutBatch:
        """The batch with its tensors on ``device`` (its ``extra`` a new dict)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Tensor):
                v = v.to(device)
            elif isinstance(v, dict):
                v = {k: t.to(device) for k, t in v.items()}
            out[f.name] = v
        return RolloutBatch(**out)

    @staticmethod
    def concat(batches: list[RolloutBatch]) -> RolloutBatch:
        """Stack batches row-wise, right-padding per-token tensors to the longest ``T`` (prompts
        are left-padded to the longest ``P``). Optional fields must be set in all or none."""
        T = max(b.completion_ids.shape[1] for b in batches)
        P = max(b.prompt_ids.shape[1] for b in batches)
        out: dict[str, Any] = {}
        for f in dataclasses.fields(RolloutBatch):
            vals = [getattr(b, f.name) for b in batches]
            if f.name == "max_new_tokens":
                out[f.name] = max(vals)
            elif f.name in ("prompt_ids", "prompt_mask"):
                out[f.name] = torch.cat([torch.nn.functional.pad(v, (P - v.shape[1], 0)) for v in vals])
            elif isinstance(vals[0], Tensor) or (vals[0] is None and any(v is not None for v in vals)):
                if any(v is None for v in vals):
                    raise ValueError(f"cannot concatenate batches where only some have {f.name}")
                out[f.name] = torch.cat([_pad_right(v, T) for v in vals])
            elif isinstance(vals[0], dict):
                keys = set(vals[0])
                if any(set(v) != keys for v in vals):
                    raise ValueError("cannot concatenate batches with different extra fields")
                out[f.name] = {k: torch.cat([_pad_right(v[k], T) for v in vals]) for k in keys}
            elif isinstance(vals[0], list):
                out[f.name] = [x for v in vals for x in v]
            else:
                out[f.name] = None
        return RolloutBatch(**out)


def _pad_right(v: Tensor, T: int) -> Tensor:
    """Right-pad dim 1 of a [B, t, ...] tensor with zeros to T; [B] tensors pass through."""
    if v.dim() < 2:
        return v
    return torch.nn.functional.pad(v, (0, 0) * (v.dim() - 2) + (0, T - v.shape[1]))


class Sampler(Protocol):
    """What the engine offers a method that generates more rollouts itself (``Method.augment``)."""

    def complete(self, batch: RolloutBatch, index: Tensor, prefixes: list[Tensor], extra: bool = False) -> RolloutBatch:
        """For each row ``index[j]`` of ``batch``, continue the completion ``prefixes[j]`` (a 1-D
        tensor of token ids) with the current policy up to ``batch.max_new_tokens`` tokens in all,
        and verify it against that row's problem. Returns a batch of ``len(index)`` rows with the
        same prompts, rows and group ids; completion = prefix + continuation. Log-probs are filled
        by the engine afterwards, like any rollout's. The continuations count as training samples
        (a method's repairs, trained on), or with ``extra`` apart from them, as ``generate``'s do
        (a method's value estimates, only verified); their tokens count in the token budget."""
        ...

    def token_starts(self, batch: RolloutBatch) -> list[list[int]]:
        """For each row, the character offset in its completion text (``batch.completions``) at which
        each of its completion tokens starts, as the tokenizer decodes them (a method's steps, found
        in the text, mapped to tokens)."""
        ...

    def generate(self, prompts: list[str], rows: list[dict]) -> RolloutBatch:
        """One completion of each prompt string, sampled by the current policy with the training
        sampling settings and verified against ``rows[j]`` (e.g. IBPO's revision of an attempt), for
        the method's own use, not to train on: its tokens count in the token budget, its completions
        apart from the training samples (``RunResult.extra_samples``), so a sample budget stays exact;
        ``group_ids`` is ``arange(len(prompts))``."""
        ...

    def logprobs(self, batch: RolloutBatch, prompts: list[str]) -> Tensor:
        """[B, T] log pi(y_t | prompt', y_<t) of ``batch``'s completions under the current policy,
        each row's prompt replaced by the string ``prompts[i]``, at the sampling temperature, with no
        gradient (e.g. GCPO's negative prompt); 0 at masked positions."""
        ...


@dataclass(frozen=True)
class Outcome:
    """What a verifier says about one completion. Never a bare float; no partial credit."""

    reward: float
    correct: bool
    parsed: str | None = None  # the answer the verifier extracted, for inspection
    correct_flexible: bool | None = None  # the lenient extraction's verdict, reported beside
    error: str | None = None  # why it was graded wrong without a verdict: "timeout", "no answer", a sandbox limit
    blame: int | None = None
    """For a failed completion, the character offset in its text of the first wrong character (where
    it first went wrong; its length when it stopped too early); None when correct or when the task
    cannot tell. The engine maps it to a completion token for its credit diagnostics."""


# ------------------------------------------------------------------------------------- tasks
CODE_EXECUTION_ENV = "CREDITBENCH_ALLOW_CODE_EXECUTION"


def code_execution_allowed(flag: bool = False) -> bool:
    """The explicit opt-in to run model-written code: the flag, or $CREDITBENCH_ALLOW_CODE_EXECUTION=1."""
    return flag or os.environ.get(CODE_EXECUTION_ENV, "") == "1"


def code_execution_refused(task: str) -> str:
    return (
        f"task {task!r} runs model-written code; it only does so when you opt in with --allow_code_execution "
        f"(creditbench eval), allow_code_execution: true (run config) or {CODE_EXECUTION_ENV}=1. "
        "Programs run under bubblewrap and are graded outside their own process "
        "(tasks/sandbox/__init__.py states the threat model)"
    )


@dataclass(frozen=True)
class TaskConfig:
    """Options every task has; subclasses add their own."""

    template: str = "compact"
    """Prompt template: 'compact' for the tiny character-level models, 'instruct' for chat/instruct models."""


class Task:
    """A dataset with a prompt format and a verifier. A task module in ``tasks/`` subclasses it and
    registers it with ``@TASKS.register(name)``; the engine only ever talks to this interface.

    Rows of :meth:`load` have at least ``id``, ``question`` and ``answer`` (the gold answer as a
    string); tasks that support the supervised warm-start also have ``solution``.
    """

    Config: ClassVar[type[TaskConfig]] = TaskConfig
    name: ClassVar[str] = ""
    """The registered name (set by ``TASKS.register``)."""
    VERSION: ClassVar[str] = "0"
    description: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = ("train", "eval")
    executes_code: ClassVar[bool] = False
    """True for tasks whose verifier runs model-written programs: they only run after an explicit
    opt-in (``allow_code_execution`` / ``--allow_code_execution`` / $CREDITBENCH_ALLOW_CODE_EXECUTION=1)."""
    step_delimiter: ClassVar[str | None] = None
    """The text that starts each new step of a completion, where the task can say where its steps end (the
    Monte-Carlo step values of bench.mc_values and the probe's oracle arm need it); None: it cannot."""

    def __init__(self, config: TaskConfig | None = None):
        self.config = config if config is not None else self.Config()

    def load(self, split: str):  # -> datasets.Dataset
        raise NotImplementedError

    def prompt(self, row: dict[str, Any], tokenizer=None) -> str:
        raise NotImplementedError

    def reference(self, row: dict[str, Any]) -> str | None:
        """The row's one right completion, where the task has exactly one (then the probability of it is
        the exact objective J, :mod:`bench.engine.exact`); None where many completions are right."""
        return None

    def verify(self, completions: list[str], rows: list[dict[str, Any]], details: bool = True) -> list[Outcome]:
        """One Outcome per completion. ``details=False`` (training rollouts) may skip what only
        reports need, e.g. the flexible extraction; reward and correctness must not change."""
        raise NotImplementedError


# ----------------------------------------------------------------------------------- methods
@dataclass(frozen=True)
class MethodConfig:
    """Fields every method has; each method's subclass sets its paper's defaults."""

    aggregation: str = "token-mean"
    """How the [B, T] loss becomes a scalar: see bench.numerics.AGGREGATIONS."""
    kl_coef: float = 0.0
    """beta of the k3 KL-to-reference loss term (0 disables the reference forward)."""

    def __post_init__(self) -> None:
        from bench.numerics import AGGREGATIONS

        if self.aggregation not in AGGREGATIONS:
            raise CreditBenchError(f"unknown aggregation {self.aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
        check(self.kl_coef >= 0, f"kl_coef must be >= 0, got {self.kl_coef}")


@dataclass
class LossOutput:
    loss: Tensor  # [B, T] per-token loss (the engine aggregates it)
    stats: dict[str, Tensor] = field(default_factory=dict)  # [B, T] per-token diagnostics
    mask: Tensor | None = None
    """[B, T] the tokens the loss is aggregated over (its token and sequence counts too) when set,
    instead of ``completion_mask``: a method that drops tokens from the loss (DAPO's overlong filter)."""
    scalars: dict[str, Tensor] = field(default_factory=dict)
    """0-dim diagnostics of the minibatch that are not per-token means (e.g. a mean over rows),
    logged as ``train/<key>``, averaged over the update's minibatches."""
    kl_mask: Tensor | None = None  # [B, T] the KL term's tokens when set, else mask's (the placebo's: the method's)


class Method:
    """A credit-assignment method: ``credit`` turns a scored batch into [B, T] advantages and
    ``loss`` turns them and the current log-probs into a [B, T] per-token loss.

    Subclasses set ``Config`` (a frozen dataclass with the paper's defaults), ``needs``, a
    one-line ``description`` and the ``paper``, and register with ``@METHODS.register(name)``.
    """

    Config: ClassVar[type[MethodConfig]] = MethodConfig
    needs: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    summary: ClassVar[tuple[str, ...]] = ()
    """Statistics of the method's ``loss`` (keys of LossOutput.stats or .scalars, logged as
    train/<key>) that a run's result keeps as means over its RL steps (RunResult.train, the report's
    columns), besides the engine's own: train reward and the credit's concentration."""

    twin_options: ClassVar[dict[str, Any] | None] = None
    """The option values that make this method's per-token credit uniform while keeping the rest of
    its recipe (sampling, filters, clip, KL, aggregation): its credit-off twin. None: the method's
    credit is already uniform (a baseline), so it has no twin."""
    placebo_control: ClassVar[bool] = False
    """Whether the placebo (this method's per-token credit moved to random tokens of the same
    completion, bench.engine.placebo) is one of its controls: True where the credit selects or weights
    tokens at the first update; a trace's credit is uniform there (every ratio is 1), so its placebo
    would be its twin."""

    group_relative: ClassVar[bool] = True
    """Whether the credit's sign follows each row's reward against its group's mean (the contract tests
    hold it); False for a method with a baseline of its own (Monte-Carlo values)."""

    run_settings: ClassVar[dict[str, Any]] = {}
    """Run settings (dotted config keys) this method cannot run without, which a generated sweep gives
    its entry (``creditbench judge``): ARCA's LoRA adapter."""

    def __init__(self, config: MethodConfig | None = None):
        self.config = config if config is not None else self.Config()

    def twin(self) -> dict[str, Any] | None:
        """The credit-off twin of this method *with this config* (option values over the config's),
        or None; a method whose off switch depends on its mode overrides this."""
        return None if self.twin_options is None else dict(self.twin_options)

    def inert(self, rl: Any) -> str | None:
        """Why this method's credit cannot differ from its credit-off twin's under the RL settings ``rl``
        (a :class:`bench.config.RLConfig`), in one clause naming the fix; None where it can. A sweep
        warns at expansion and its report marks the label."""
        return None

    @property
    def required(self) -> frozenset[str]:
        """What the engine must compute for this method with this config."""
        return self.needs | ({"ref_logprobs"} if self.config.kl_coef > 0 else frozenset())

    def credit(self, batch: RolloutBatch) -> Tensor:  # [B, T]
        raise NotImplementedError

    # Optional hooks. The engine calls them for every method; the defaults do nothing.
    @property
    def generation_rounds(self) -> int:
        """How many rollout batches the engine may generate per step to fill it with groups that
        ``keep_groups`` keeps (DAPO's dynamic sampling); 1 means no refilling."""
        return 1

    @property
    def adds_training_rows(self) -> bool:
        """Whether ``augment`` appends rows to train on (IBPO's repairs): training samples beyond the
        rollouts, which a sample budget cannot stop at exactly (such a config is refused under one)."""
        return False

    @property
    def augment_rollouts(self) -> int:
        """K where ``augment`` samples K continuations from the state before every step of each completion
        (Monte-Carlo step values): what a probe's dry run charges it, at the pace of the oracle's true
        advantages (bench.paired.probe.PACE_S); 0 where it samples none, or only a few (one state each)."""
        return 0

    @property
    def update_pace(self) -> float:
        """What this config's update (its scoring, credit, loss, backward and step, and an ``augment`` that only
        scores) costs against GRPO's on the same model and adapter, as bench/perf/methods.py measures it
        (results/benchmarks/methods_update.md): what a probe's dry run charges each of its updates; 1 where
        the benchmark finds no difference."""
        return 1.0

    def keep_groups(self, batch: RolloutBatch) -> Tensor | None:
        """[num_groups] bool: the groups to train on, or None for all. Dropped groups are replaced
        by groups of fresh prompts, up to ``generation_rounds`` rollout batches per step."""
        return None

    @property
    def trust_region(self) -> bool:
        """Whether this config's loss stops pushing a token once its ratio leaves a trust region
        (a clip); False for plain REINFORCE-style objectives (ARCA's official loss)."""
        return True

    def augment(self, batch: RolloutBatch, sampler: Sampler) -> RolloutBatch:
        """Add rollouts the method generates itself (e.g. IBPO's repaired trajectories) before
        scoring; returns the batch to train on. Rows added must keep the batch's group ids."""
        return batch

    def on_minibatch(self, batch: RolloutBatch) -> None:
        """Called once on each PPO minibatch (after ``credit``, before ``loss``), before the engine
        splits it into micro-batches under a token budget: a loss that couples the minibatch's rows
        computes that part here, into ``batch.extra``, so every micro-batch's ``loss`` reads the
        whole minibatch's choice (bench.engine.microbatch)."""

    def loss(self, batch: RolloutBatch, logprobs: Tensor, credit: Tensor) -> LossOutput:
        """The [B, T] per-token loss; its ``mask`` (tokens the aggregation counts) may depend on the
        batch but not on ``logprobs``, so micro-batches can be normalised by the whole minibatch's."""
        raise NotImplementedError


def check(cond: bool, message: str) -> None:
    if not cond:
        raise CreditBenchError(message)
