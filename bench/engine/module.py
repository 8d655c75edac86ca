"""The LightningModule that trains a policy with any registered method.

One training step (manual optimization):

    rows -> rollout (the engine: HF generate or vLLM, G per prompt) -> verify (task) [-> refill dropped
    groups with fresh prompts (method.keep_groups)] [-> method.augment] -> score (only what the method
    needs) -> credit (method) -> PPO epochs x minibatches of: loss (method) + beta*KL, aggregate,
    backward, clip, step -> log (including the credit/* diagnostics of bench.engine.diagnostics)

The module only orchestrates: the Lightning hooks call plain functions that a test or a script can
call without a Trainer -- sampling in bench.engine.sampling, scoring and the update in
bench.engine.step, the eval numbers in bench.engine.metrics (the exact objective J in
bench.engine.exact), the credit map in bench.engine.credit_map, the blame alignment in
bench.engine.blame, the prompt order in bench.engine.data. Its evaluation hooks live in
bench.engine.evaluation and its fixed sets in bench.engine.fixed_sets; the RL step is here. It never
branches on a method's or a task's name: a method declares ``needs`` and the step computes exactly
that.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import lightning as L
import torch

from bench.config import EvalConfig, RLConfig
from bench.core import Method, RolloutBatch, Task
from bench.distributed import gather_objects, mean_over_processes, rank, world_size
from bench.engine import scoring, step
from bench.engine.base_eval import BaseEvalCache
from bench.engine.blame import (
    BlameProbe,
    blame_probe_from_state,
    blame_probe_state,
    blame_tokens,
)
from bench.engine.checkpoint import MetricSink, check_fits, rng_states, set_rng_states, trainable_state
from bench.engine.credit_map import credit_map, group_from_state, group_state
from bench.engine.evaluation import Evaluation
from bench.engine.fixed_sets import FixedSets
from bench.engine.metrics import EvalEpoch
from bench.engine.rollout import HFRolloutEngine, RolloutEngine, rollout_mismatch
from bench.engine.sampling import RolloutSampler, eval_due, reward_stats, rounds_left, train_rollouts
from bench.engine.sharding import ShardPlan
from bench.engine.step import SkippedUpdates

NEVER = 2**62
"""Lightning's ``val_check_batch`` on a step not followed by an eval: the module decides each step."""
TRAIN_SUMMARY = (
    "train/reward",
    "credit/gini",
    "credit/effective_token_ratio",
    "credit/nonzero_frac",
    "credit/mass_early",
    "credit/mass_middle",
    "credit/mass_late",
)
"""Training statistics a run's result keeps as means over its RL steps (``RunResult.train``) for
every method: the average train reward and where the credit went (its concentration, the share of
tokens it reaches, its mass by third of the completion). A method adds its own (``Method.summary``,
e.g. ARCA's weight concentration). Besides, the result keeps the largest gradient norm
(``train_grad_norm_max``) and the updates skipped as non-finite (``train_skipped_updates``)."""


class RLVRModule(Evaluation, FixedSets, L.LightningModule):
    """Trains ``policy`` with ``method`` on ``task``, sampling with ``engine`` (the policy's own
    ``generate`` when None) and evaluating on ``eval_tasks`` (the task alone when None)."""

    def __init__(
        self,
        policy,
        tokenizer,
        method: Method,
        task: Task,
        task_name: str,
        rl: RLConfig,
        eval_cfg: EvalConfig,
        ref_policy=None,
        eval_tasks: dict[str, Task] | None = None,
        engine: RolloutEngine | None = None,
    ):
        super().__init__()
        scoring.check_method(method, policy, ref_policy)
        self.automatic_optimization = False
        self.policy, self.ref_policy, self.tokenizer = policy, ref_policy, tokenizer
        policy.train()  # from_pretrained returns models in eval mode
        if ref_policy is not None:
            ref_policy.requires_grad_(False).eval()
        self.method, self.task, self.task_name, self.rl, self.eval_cfg = method, task, task_name, rl, eval_cfg
        self.engine = engine if engine is not None else HFRolloutEngine(policy, tokenizer)
        # samples, verifies and counts; the Sampler (bench.core) that methods generating more rollouts call
        self.sampler = RolloutSampler(self.engine, tokenizer, task, rl.sampling, policy=policy)
        self.eval_tasks = eval_tasks or {task_name: task}  # evaluated in this order; the first is the primary
        self.evals = EvalEpoch(list(self.eval_tasks), eval_cfg, rl.samples_to_log)
        self.rl_step = 0  # completed RL steps
        self.eval_due = False  # whether the step just taken is followed by an eval
        self.skips = SkippedUpdates(rl.max_skipped_updates)
        self.eval_history: list[dict[str, Any]] = []
        self.train_sums: dict[str, list[float]] = {}  # TRAIN_SUMMARY key -> [sum, count] over RL steps
        self.grad_norm_max = -math.inf  # the largest finite gradient norm of the run's updates
        self._credit_group: tuple[RolloutBatch, int] | None = None
        self._blame_probe: BlameProbe | None = None
        self._seed: int | None = None  # the run's seed, read at the first setup (see setup)
        self.sink: MetricSink | None = None  # set by a run (a resumed one skips what MLflow has); else the logger
        self.resumed_from: int | None = None  # the RL step of the checkpoint this run resumed from
        self.last_checkpoint_step: int | None = None  # the RL step of the last checkpoint written or loaded
        self.wall_before = 0.0  # seconds spent by earlier processes of a resumed run
        self.t_start = time.perf_counter()  # when this process's part of the run started
        self.strict_loading = False  # a checkpoint holds only the weights that train (see trainable_state)
        self.shard_plan: ShardPlan | None = None  # FSDP: how configure_model shards the policies (set by the run)
        self.base_eval: BaseEvalCache | None = None  # reuses the step-0 eval where it can (set by the run)

    @property
    def samples(self) -> int:
        """Completions generated for training, by every process (the sample budget counts them)."""
        return self.sampler.samples

    @property
    def tokens(self) -> int:
        """Completion tokens generated for training, by every process (the token budget counts them)."""
        return self.sampler.tokens

    @property
    def skipped_updates(self) -> int:
        """Updates skipped for a non-finite loss or gradient."""
        return self.skips.count

    def setup(self, stage: str) -> None:
        """With several processes, give each its own sampling stream, the run's seed plus its rank:
        Lightning seeds them all alike, and equal draws would correlate different prompts' rollouts."""
        if rank():
            if self._seed is None:
                self._seed = torch.initial_seed()
            torch.manual_seed(self._seed + rank())

    def on_train_start(self) -> None:
        if self.resumed_from is not None and self.engine.separate:  # its own weights: the restored ones
            self.engine.sync(self.policy)

    def configure_model(self) -> None:
        """FSDP (Lightning's ModelParallelStrategy): shard the policy and the reference copy."""
        for model in (self.policy, self.ref_policy) if self.shard_plan is not None else ():
            if model is not None:
                self.shard_plan.apply(model, self.device_mesh)

    def _whole(self, *models):
        """FSDP: a block in which ``models`` are whole on every process (ShardPlan.gathered); entered
        and left by every process together. Without FSDP, nothing."""
        return self.shard_plan.gathered(*models) if self.shard_plan is not None else contextlib.nullcontext()

    def configure_optimizers(self):
        opt, schedule = step.make_optimizer(self.policy, self.rl)
        if self.shard_plan is not None:  # the whole weights a step works with are a copy: gather the new ones
            opt.register_step_post_hook(lambda *_: self.shard_plan.refresh(self.policy))
        return [opt], [{"scheduler": schedule, "interval": "step"}]

    # ------------------------------------------------------------------ one RL step
    def score_batch(self, batch: RolloutBatch, fused: bool | None = None) -> scoring.Scored:
        """:func:`bench.engine.scoring.score_batch` with this module's policies and method."""
        with self._whole(self.ref_policy):
            return scoring.score_batch(self.policy, self.ref_policy, self.method, batch, rl=self.rl, fused=fused)

    def update(self, batch: RolloutBatch, scored: scoring.Scored) -> dict[str, float]:
        """:func:`bench.engine.step.update` with this module's optimizer, schedule and backward."""
        opt = step.Optimization(
            self.optimizers(), self.lr_schedulers(), self.manual_backward, self.skips, no_sync=self.no_grad_sync
        )
        return step.update(self.policy, self.method, batch, self.rl, opt=opt, scored=scored, step=self.rl_step + 1)

    def no_grad_sync(self):
        """A context in which a backward accumulates gradients locally, without the strategy's
        all-reduce (DDP's no_sync): entered for every micro-batch of a minibatch but the last."""
        if self.shard_plan is not None:  # FSDP: no reduce-scatter (whole gradients accumulate)
            return self.shard_plan.no_sync(self.policy)
        strategy = self.trainer.strategy if self._trainer is not None else None
        block = getattr(strategy, "block_backward_sync", None)
        return block() if block is not None else contextlib.nullcontext()

    def training_step(self, rows: list[dict], batch_idx: int) -> None:
        with self._whole(self.policy):  # FSDP: gathered once for the step's rollouts, scoring and update
            self._rl_step(rows)

    def _rl_step(self, rows: list[dict]) -> None:
        rl, sampler = self.rl, self.sampler
        sampler.verify_s = 0.0
        counted = sampler.samples, sampler.tokens, sampler.extra
        t0 = time.perf_counter()
        limit = rounds_left(self.samples, rl, self.eval_cfg.every_samples)  # up to the budget and next eval point
        drawn = train_rollouts(sampler, self.method, rows, rl, self.trainer.datamodule.refill, max_rounds=limit)
        batch = self.method.augment(drawn.batch, sampler)
        sampler.gather_counts(counted, self.device)  # every process's generations count
        self.engine.sleep()  # a separate engine frees its memory until the next sync
        t1 = time.perf_counter()
        scored = self.score_batch(batch)
        t2 = time.perf_counter()
        stats = self.update(batch, scored)
        t3 = time.perf_counter()
        if self.engine.separate:  # it samples the next step with the new weights
            self.engine.sync(self.policy)
            stats["time/sync_s"] = time.perf_counter() - t3
        if "rollout_logprobs" in batch.extra:  # the train/inference mismatch, on the behaviour log-probs
            stats.update(rollout_mismatch(batch.old_logprobs, batch.extra["rollout_logprobs"], batch.completion_mask))

        self.rl_step += 1
        stats.update(reward_stats(drawn.generated))
        stats.update(
            {
                "train/batch_size": float(batch.size),
                "train/samples": float(self.samples),
                "train/tokens": float(self.tokens),
                "time/rollout_s": t1 - t0 - sampler.verify_s,
                "time/verify_s": sampler.verify_s,
                "time/score_s": t2 - t1,
                "time/update_s": t3 - t2,
                "time/step_s": time.perf_counter() - t0,
            }
        )
        if drawn.kept_groups is not None:
            stats["train/generation_rounds"] = float(drawn.rounds)
            stats["train/kept_groups"] = float(drawn.kept_groups)
        # with several processes: the mean of each process's statistic (over equal shares of the
        # step's prompts), the sum of the batch sizes
        stats = mean_over_processes(stats, sums=("train/batch_size", "train/kept_groups"))
        self._log(stats)
        for k in (*TRAIN_SUMMARY, *(f"train/{name}" for name in self.method.summary)):
            if stats.get(k) is not None and math.isfinite(stats[k]):
                acc = self.train_sums.setdefault(k, [0.0, 0])
                acc[0], acc[1] = acc[0] + stats[k], acc[1] + 1
        if math.isfinite(stats.get("train/grad_norm", math.nan)):
            self.grad_norm_max = max(self.grad_norm_max, stats["train/grad_norm"])
        self.log("reward", stats["train/reward"], prog_bar=True, logger=False, batch_size=batch.size)
        if self.budget_spent or self.rl_step >= rl.steps:
            self.trainer.should_stop = True
        self.eval_due = self.trainer.should_stop or eval_due(counted[0], self.samples, self.rl_step, self.eval_cfg)
        self.trainer.val_check_batch = 1 if self.eval_due else NEVER  # Lightning validates after this step or not

    @property
    def budget_spent(self) -> bool:
        """Whether the run's sample or token budget (``rl.budget_*``; 0 is none) is used up."""
        rl = self.rl
        return bool(
            (rl.budget_samples and self.samples >= rl.budget_samples)
            or (rl.budget_tokens and self.tokens >= rl.budget_tokens)
        )

    def train_summary(self) -> dict[str, float]:
        """Means over the run's RL steps of the TRAIN_SUMMARY statistics and the method's summary ones,
        the largest gradient norm and the count of skipped updates."""
        out = {k.replace("/", "_"): s / n for k, (s, n) in self.train_sums.items() if n}
        if math.isfinite(self.grad_norm_max):
            out["train_grad_norm_max"] = self.grad_norm_max
        return out | {"train_skipped_updates": float(self.skipped_updates)}

    def measure_credit_map(self) -> dict[str, Any] | None:
        """The credit map: this method's effective credit on its fixed group under the current policy, or None without
        one; ``blame`` is the index of the token where the completion first went wrong (see
        :mod:`bench.engine.blame`), None when the task cannot tell."""
        if self._credit_group is None:
            return None
        batch, row = self._credit_group
        with self._whole(self.policy, self.ref_policy):
            out = credit_map(
                self.policy,
                self.ref_policy,
                self.method,
                self.sampler,
                self.rl,
                self._credit_group,
                self._rng_devices(),
            )
        return out | {"blame": blame_tokens(self.sampler, batch.select(torch.tensor([row])))[0]}

    def _rng_devices(self) -> list[int]:
        return [self.device.index or 0] if self.device.type == "cuda" else []

    @property
    def _out(self) -> MetricSink:
        """Where metrics and tables go: the run's sink, else straight to the logger."""
        return self.sink if self.sink is not None else MetricSink(self.logger)

    def _log(self, metrics: dict[str, float]) -> None:
        self._out.log({k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}, self.rl_step)

    # ------------------------------------------------------------------ checkpoints (see bench.engine.checkpoint)
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["state_dict"] = trainable_state(checkpoint["state_dict"], self)
        checkpoint["creditbench"] = {
            "rl_step": self.rl_step, "samples": self.samples, "tokens": self.tokens, "extra": self.sampler.extra,
            "eval_history": self.eval_history,
            "train_sums": self.train_sums, "grad_norm_max": self.grad_norm_max, "skipped_updates": self.skipped_updates,
            "probe": group_state(self._credit_group),
            "blame_probe": blame_probe_state(self._blame_probe),
            "rng": gather_objects(rng_states()),
            "wall_s": self.wall_before + time.perf_counter() - self.t_start,
        }  # fmt: skip

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_fits(checkpoint["state_dict"], self)
        c = checkpoint["creditbench"]
        self.rl_step, self.sampler.samples, self.sampler.tokens = c["rl_step"], c["samples"], c["tokens"]
        self.sampler.extra = c.get("extra", 0)
        self.eval_history, self.skips.count = c["eval_history"], c["skipped_updates"]
        self.train_sums = c.get("train_sums", {})
        self.grad_norm_max = c.get("grad_norm_max", -math.inf)
        self.resumed_from = self.last_checkpoint_step = self.rl_step
        self.wall_before = c["wall_s"]
        if c["probe"] is not None:
            self._credit_group = group_from_state(c["probe"])
        self._blame_probe = blame_probe_from_state(c.get("blame_probe"))
        set_rng_states(c["rng"][rank()] if len(c["rng"]) == world_size() else c["rng"][0])
