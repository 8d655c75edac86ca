"""The LightningModule that trains a policy with any registered method.

One training step (manual optimization):

    rows -> rollout (HF generate, G per prompt) -> verify (task) -> score (only what the method
    needs) -> credit (method) -> PPO epochs x minibatches of: loss (method) + beta*KL, aggregate,
    backward, clip, step -> log

The module never branches on a method's or a task's name: a method declares ``needs`` and the
module computes exactly that. When there is a single on-policy update (1 epoch, 1 minibatch) the
behaviour log-probs and entropies come from the training forward itself (detached), so no
separate scoring forward is spent; the ratio is then exactly 1, as in on-policy GRPO.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import MLFlowLogger
from torch.utils.data import DataLoader

from bench.config import EvalConfig, RLConfig
from bench.core import Method, RolloutBatch
from bench.errors import CreditBenchError
from bench.metrics import PassAtK, metric_key
from bench.numerics import aggregate, k3_kl, masked_mean
from bench.policy import score
from bench.rollout import HFRolloutEngine
from bench.tasks_base import Task

SUPPORTED_NEEDS = frozenset({"entropy", "ref_logprobs"})


def _rows(batch: list[dict]) -> list[dict]:
    return batch


class PromptDataModule(L.LightningDataModule):
    """Train prompts in a seeded random order, ``prompts_per_step`` per RL step; eval problems in
    fixed order."""

    def __init__(self, task: Task, prompts_per_step: int, eval_cfg: EvalConfig, seed: int):
        super().__init__()
        self.task, self.prompts_per_step, self.eval_cfg, self.seed = task, prompts_per_step, eval_cfg, seed
        self.train_rows = self.eval_rows = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_rows is None:
            self.train_rows = self.task.load("train")
            ev = self.task.load("eval")
            self.eval_rows = ev.select(range(min(self.eval_cfg.num_problems, len(ev))))

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(self.seed)
        return DataLoader(self.train_rows, batch_size=self.prompts_per_step, shuffle=True, generator=g,
                          collate_fn=_rows, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.eval_rows, batch_size=self.eval_cfg.batch_problems, collate_fn=_rows)


class RLVRModule(L.LightningModule):
    def __init__(self, policy, tokenizer, method: Method, task: Task, task_name: str, rl: RLConfig,
                 eval_cfg: EvalConfig, ref_policy=None):
        super().__init__()
        unsupported = method.required - SUPPORTED_NEEDS
        if unsupported:
            raise CreditBenchError(f"method needs {sorted(unsupported)}, which this engine cannot compute yet")
        if "ref_logprobs" in method.required and ref_policy is None:
            raise CreditBenchError("method needs reference log-probs but no reference policy was given")
        self.automatic_optimization = False
        self.policy, self.ref_policy, self.tokenizer = policy, ref_policy, tokenizer
        policy.train()  # from_pretrained returns models in eval mode
        if ref_policy is not None:
            ref_policy.requires_grad_(False).eval()
        self.method, self.task, self.task_name, self.rl, self.eval_cfg = method, task, task_name, rl, eval_cfg
        self.engine = HFRolloutEngine(policy, tokenizer)
        self.eval_metric = PassAtK(eval_cfg.k)
        self.rl_step = 0  # completed RL steps
        self.samples = 0  # completions generated for training
        self.tokens = 0  # completion tokens generated for training
        self.eval_history: list[dict[str, Any]] = []
        self._eval_extra: dict[str, list] = {}

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        rl = self.rl
        opt = torch.optim.AdamW(self.policy.parameters(), lr=rl.lr, betas=rl.betas, weight_decay=rl.weight_decay)
        total = rl.steps * rl.ppo_epochs * rl.minibatches

        def factor(step: int) -> float:
            if step < rl.warmup_steps:
                return (step + 1) / rl.warmup_steps
            frac = (step - rl.warmup_steps) / max(1, total - rl.warmup_steps)
            if rl.schedule == "cosine":
                return 0.5 * (1 + math.cos(math.pi * min(frac, 1.0)))
            if rl.schedule == "linear":
                return max(0.0, 1.0 - frac)
            return 1.0

        return [opt], [{"scheduler": torch.optim.lr_scheduler.LambdaLR(opt, factor), "interval": "step"}]

    # ------------------------------------------------------------------ one RL step
    def rollout(self, rows: list[dict], n: int, sampling, details: bool) -> tuple[RolloutBatch, list[dict]]:
        prompts = [self.task.prompt(r, self.tokenizer) for r in rows]
        gen = self.engine.generate(prompts, n, sampling)
        expanded = [r for r in rows for _ in range(n)]
        t = time.perf_counter()
        outcomes = self.task.verify(gen.texts, expanded, details=details)
        self._verify_s = time.perf_counter() - t
        batch = RolloutBatch(
            prompt_ids=gen.prompt_ids, prompt_mask=gen.prompt_mask,
            completion_ids=gen.completion_ids, completion_mask=gen.completion_mask,
            group_ids=torch.arange(len(rows), device=gen.completion_ids.device).repeat_interleave(n),
            rewards=torch.tensor([o.reward for o in outcomes], dtype=torch.float32, device=self.device),
            correct=torch.tensor([o.correct for o in outcomes], device=self.device),
            truncated=gen.truncated, max_new_tokens=sampling.max_new_tokens,
            prompts=[p for p in prompts for _ in range(n)], completions=gen.texts,
        )
        return batch, [{"parsed": o.parsed, "correct_flexible": o.correct_flexible} for o in outcomes]

    def _forward(self, model, b: RolloutBatch, with_entropy: bool):
        return score(model, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask,
                     self.rl.sampling.temperature or 1.0, with_entropy)

    @torch.no_grad()
    def score_batch(self, batch: RolloutBatch, fused: bool) -> None:
        """Fill what the method needs that the training forward cannot provide."""
        if "ref_logprobs" in self.method.required:
            batch.ref_logprobs = self._forward(self.ref_policy, batch, with_entropy=False).logprobs
        if not fused:
            s = self._forward(self.policy, batch, with_entropy=True)
            batch.old_logprobs, batch.entropy = s.logprobs, s.entropy

    def update(self, batch: RolloutBatch, fused: bool) -> dict[str, float]:
        opt, sched = self.optimizers(), self.lr_schedulers()
        cfg, rl = self.method.config, self.rl
        credit = None if fused else self.method.credit(batch)
        acc: dict[str, list[float]] = {}
        for _ in range(rl.ppo_epochs):
            order = torch.randperm(batch.size, device=self.device) if rl.minibatches > 1 else None
            for mb_index in range(rl.minibatches):
                if order is None:
                    mb, idx = batch, None
                else:
                    idx = order.tensor_split(rl.minibatches)[mb_index]
                    mb = batch.select(idx)
                s = self._forward(self.policy, mb, with_entropy=fused)  # else the scoring pass had it
                if fused:  # single on-policy update: behaviour = current policy, ratio == 1
                    batch.old_logprobs, batch.entropy = s.logprobs.detach(), s.entropy
                    credit = self.method.credit(batch)
                c = credit if idx is None else credit[idx]
                out = self.method.loss(mb, s.logprobs, c)
                per_token = out.loss
                if cfg.kl_coef > 0:
                    kl = k3_kl(s.logprobs, mb.ref_logprobs)
                    per_token = per_token + cfg.kl_coef * kl
                    acc.setdefault("loss/kl", []).append(float(masked_mean(kl.detach(), mb.completion_mask)))
                loss = aggregate(per_token, mb.completion_mask, cfg.aggregation, max_len=batch.max_new_tokens)
                opt.zero_grad(set_to_none=True)
                self.manual_backward(loss)
                gn = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), rl.grad_clip or float("inf"))
                opt.step()
                sched.step()
                acc.setdefault("loss/total", []).append(float(loss.detach()))
                acc.setdefault("train/grad_norm", []).append(float(gn))
                for k, v in out.stats.items():
                    acc.setdefault(f"train/{k}", []).append(float(masked_mean(v.detach(), mb.completion_mask)))
        stats = {k: float(np.mean(v)) for k, v in acc.items()}
        mask = batch.completion_mask
        stats["train/entropy"] = float(masked_mean(batch.entropy, mask))
        stats["credit/abs_mean"] = float(masked_mean(credit.abs(), mask))
        stats["credit/nonzero_frac"] = float(masked_mean((credit != 0).float(), mask))
        stats["train/lr"] = float(sched.get_last_lr()[0])
        return stats

    def training_step(self, rows: list[dict], batch_idx: int) -> None:
        rl = self.rl
        t0 = time.perf_counter()
        batch, _ = self.rollout(rows, rl.group_size, rl.sampling, details=False)
        t1 = time.perf_counter()
        fused = rl.ppo_epochs == 1 and rl.minibatches == 1
        self.score_batch(batch, fused)
        t2 = time.perf_counter()
        stats = self.update(batch, fused)
        t3 = time.perf_counter()

        self.rl_step += 1
        lengths = batch.lengths.float()
        self.samples += batch.size
        self.tokens += int(lengths.sum())
        rewards = batch.rewards.view(-1, rl.group_size)
        stats.update({
            "train/reward": float(batch.rewards.mean()),
            "train/accuracy": float(batch.correct.float().mean()),
            "train/response_length": float(lengths.mean()),
            "train/truncated_frac": float(batch.truncated.float().mean()),
            "train/mixed_group_frac": float((rewards.max(1).values != rewards.min(1).values).float().mean()),
            "train/samples": float(self.samples),
            "train/tokens": float(self.tokens),
            "time/rollout_s": t1 - t0 - self._verify_s,
            "time/verify_s": self._verify_s,
            "time/score_s": t2 - t1,
            "time/update_s": t3 - t2,
            "time/step_s": t3 - t0,
        })
        self._log(stats)
        self.log("reward", stats["train/reward"], prog_bar=True, logger=False, batch_size=batch.size)

    # ------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self.eval_metric.reset()
        self._eval_extra = {"lengths": [], "tokens_correct": [], "truncated": [], "flex": [], "samples": []}

    def validation_step(self, rows: list[dict], batch_idx: int) -> None:
        n = self.eval_cfg.n
        batch, info = self.rollout(rows, n, self.eval_cfg.sampling, details=True)
        self.eval_metric.update(batch.correct.view(len(rows), n).cpu())
        ex = self._eval_extra
        ex["lengths"].extend(batch.lengths.tolist())
        ex["truncated"].extend(batch.truncated.tolist())
        ex["flex"].extend(bool(i["correct_flexible"]) for i in info)
        if len(ex["samples"]) < self.rl.samples_to_log:
            for j in range(0, batch.size, n):  # one completion per problem
                ex["samples"].append({"prompt": batch.prompts[j], "completion": batch.completions[j],
                                      "parsed": info[j]["parsed"], "reward": float(batch.rewards[j]),
                                      "answer": rows[j // n]["answer"]})

    def on_validation_epoch_end(self) -> None:
        res = self.eval_metric.compute()
        ex = self._eval_extra
        lengths = np.array(ex["lengths"], dtype=float)
        n_correct = res["pass_at_1"] * res["num_problems"] * self.eval_cfg.n
        res["mean_length"] = float(lengths.mean())
        res["truncated_frac"] = float(np.mean(ex["truncated"]))
        res["flexible_avg_at_n"] = float(np.mean(ex["flex"]))
        res["tokens_per_correct"] = float(lengths.sum() / n_correct) if n_correct > 0 else float("nan")
        metrics = {metric_key("eval", self.task_name, k): v for k, v in res.items()}
        metrics[metric_key("eval", self.task_name, "samples")] = float(self.samples)
        metrics[metric_key("eval", self.task_name, "tokens")] = float(self.tokens)
        self._log(metrics)
        per_problem = self.eval_metric.per_problem()
        self.eval_history.append({"step": self.rl_step, "samples": self.samples, "tokens": self.tokens, **res,
                                  "per_problem_pass_at_1": per_problem[1].tolist()})
        if ex["samples"] and isinstance(self.logger, MLFlowLogger):
            table = {k: [s[k] for s in ex["samples"][: self.rl.samples_to_log]] for k in ex["samples"][0]}
            self.logger.experiment.log_table(self.logger.run_id, data=table,
                                             artifact_file=f"completions/step_{self.rl_step:06d}.json")
        self.log("eval_pass_at_1", res["pass_at_1"], prog_bar=True, logger=False)

    def _log(self, metrics: dict[str, float]) -> None:
        if self.logger is not None:
            clean = {k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}
            self.logger.log_metrics(clean, step=self.rl_step)
