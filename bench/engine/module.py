"""The LightningModule that trains a policy with any registered method.

One training step (manual optimization):

    rows -> rollout (the engine: HF generate or vLLM, G per prompt) -> verify (task) [-> refill dropped groups with fresh
    prompts (method.keep_groups)] [-> method.augment] -> score (only what the method needs) ->
    credit (method) -> PPO epochs x minibatches of: loss (method) + beta*KL, aggregate, backward,
    clip, step -> log (including the credit/* diagnostics of bench.engine.diagnostics)

The module never branches on a method's or a task's name: a method declares ``needs`` and the
module computes exactly that. With LoRA (a peft model) the reference policy is the base model with
the adapter disabled, so the reference forward and ARCA's adapter-off hidden states are one pass. When there is a single on-policy update (1 epoch, 1 minibatch) the
behaviour log-probs and entropies come from the training forward itself (detached), so no
separate scoring forward is spent; the ratio is then exactly 1, as in on-policy GRPO.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import MLFlowLogger
from torch.utils.data import DataLoader

from bench.config import EvalConfig, RLConfig
from bench.core import NEEDS, Method, RolloutBatch
from bench.engine.diagnostics import credit_diagnostics
from bench.distributed import all_sum, gather_objects, local, mean_over_processes, rank, world_size
from bench.errors import CreditBenchError
from bench.engine.metrics import PassAtK, metric_key
from bench.numerics import aggregate, k3_kl, masked_mean
from bench.engine.policy import score
from bench.engine.rollout import HFRolloutEngine, rollout_mismatch
from bench.tasks_base import Task

REFERENCE_NEEDS = frozenset({"ref_logprobs", "ref_entropy", "ref_kl", "hidden_residual"})


def _rows(batch: list[dict]) -> list[dict]:
    return batch


class PromptBatches:
    """The train prompts' batch order: pass after pass over the rows, each pass a seeded random
    permutation cut into batches of ``prompts_per_step`` (the last incomplete one dropped) -- the
    order ``DataLoader(rows, batch_size, shuffle=True, drop_last=True, generator=g)`` draws, with
    ``g`` seeded with the run's seed. Batch ``i`` depends only on the seed and ``i`` (the generator is
    replayed from the seed), so a resumed run (``start``: the batches already consumed) continues the
    same order however Lightning counts its epochs. With W processes each takes the ``rank``-th of W
    contiguous slices of every batch (whole prompts, hence whole groups)."""

    def __init__(self, num_rows: int, batch_size: int, seed: int, rank: int = 0, world: int = 1, start: int = 0):
        self.num_rows, self.batch_size, self.seed, self.rank, self.world = num_rows, batch_size, seed, rank, world
        self.per_pass = num_rows // batch_size
        self.start = start  # the next batch of the stream to yield

    def __len__(self) -> int:
        return self.per_pass

    def _order(self, n_pass: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed)
        for p in range(n_pass + 1):  # what each pass of a shuffling DataLoader draws from its generator:
            torch.empty((), dtype=torch.int64).random_(generator=g)  # its iterator's base seed,
            order = torch.randperm(self.num_rows, generator=g)  # the permutation,
            if p < n_pass:
                torch.randperm(self.num_rows, generator=g)  # and RandomSampler's empty remainder permutation
        return order.tolist()

    def __iter__(self):
        n_pass, skip = divmod(self.start, self.per_pass)
        order = self._order(n_pass)
        k = self.batch_size // self.world
        for b in range(skip, self.per_pass):
            self.start += 1
            batch = order[b * self.batch_size : (b + 1) * self.batch_size]
            yield batch[self.rank * k : (self.rank + 1) * k]


class PromptDataModule(L.LightningDataModule):
    """Train prompts in a seeded random order, ``prompts_per_step`` per RL step; eval problems in
    fixed order, one dataloader per eval task (the training task first).

    With W processes (DDP) every process draws the same seeded global order and takes its
    contiguous 1/W of each step's prompts; each eval set is cut into W contiguous chunks, which
    the module gathers back in order. The Trainer must leave the samplers as they are
    (``use_distributed_sampler=False``)."""

    def __init__(self, task: Task, prompts_per_step: int, eval_cfg: EvalConfig, seed: int,
                 eval_tasks: dict[str, Task] | None = None):
        super().__init__()
        self.task, self.prompts_per_step, self.eval_cfg, self.seed = task, prompts_per_step, eval_cfg, seed
        self.eval_tasks = eval_tasks
        self.train_rows = self.eval_rows = None
        self.batches_consumed = 0  # train batches already trained on (set when resuming)
        self.refill_drawn = 0  # prompts drawn from the refill stream, by every process together

    def setup(self, stage: str | None = None) -> None:
        if self.train_rows is None:
            self.train_rows = self.task.load("train")
            tasks = self.eval_tasks or {"": self.task}
            self.eval_sets = []
            for task in tasks.values():
                ev = task.load("eval")
                self.eval_sets.append(ev.select(range(min(self.eval_cfg.num_problems, len(ev)))))
            self.eval_rows = self.eval_sets[0]

    def train_dataloader(self) -> DataLoader:
        world = world_size()
        if self.prompts_per_step % world:
            raise CreditBenchError(f"rl.prompts_per_step ({self.prompts_per_step}) must be divisible by the number "
                                   f"of processes ({world}): each process rolls out whole groups")
        if len(self.train_rows) < self.prompts_per_step:
            raise CreditBenchError(f"task {self.task.__class__.__name__} has {len(self.train_rows)} train problems, fewer "
                                   f"than rl.prompts_per_step ({self.prompts_per_step})")
        batches = PromptBatches(len(self.train_rows), self.prompts_per_step, self.seed, rank(), world,
                                start=self.batches_consumed)
        # its own generator: creating an iterator draws a seed from it, never from the global RNG
        return DataLoader(self.train_rows, batch_sampler=batches, collate_fn=_rows,
                          generator=torch.Generator().manual_seed(self.seed))

    def state_dict(self) -> dict[str, int]:
        """The data position, for a checkpoint: one train batch per completed RL step."""
        return {"batches_consumed": self.trainer.lightning_module.rl_step, "refill_drawn": self.refill_drawn}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.batches_consumed, self.refill_drawn = state["batches_consumed"], state["refill_drawn"]
        self.__dict__.pop("_refill", None)

    def refill(self, n: int) -> list[dict]:
        """``n`` more train prompts for a step whose groups were dropped (dynamic sampling), from a
        separately seeded stream so the main data order does not depend on the method. With W
        processes each call takes the stream's next n x W prompts and returns this process's
        share, so no two processes get the same fresh prompt however many calls each makes."""
        if not hasattr(self, "_refill"):
            def stream(skip: int):
                g = torch.Generator().manual_seed(self.seed + 1_000_003)
                while True:
                    for i in torch.randperm(len(self.train_rows), generator=g).tolist():
                        if skip:
                            skip -= 1
                            continue
                        yield self.train_rows[i]

            self._refill = stream(self.refill_drawn)
        world, r = world_size(), rank()
        chunk = [next(self._refill) for _ in range(n * world)]
        self.refill_drawn += n * world
        return chunk[r * n : (r + 1) * n]

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        world, r = world_size(), rank()
        shares = [rows if world == 1 else rows.select(range(r * len(rows) // world, (r + 1) * len(rows) // world))
                  for rows in self.eval_sets]
        loaders = [DataLoader(rows, batch_size=self.eval_cfg.batch_problems, collate_fn=_rows,
                              generator=torch.Generator().manual_seed(self.seed)) for rows in shares]
        return loaders[0] if len(loaders) == 1 else loaders


class RLVRModule(L.LightningModule):
    def __init__(self, policy, tokenizer, method: Method, task: Task, task_name: str, rl: RLConfig,
                 eval_cfg: EvalConfig, ref_policy=None, eval_tasks: dict[str, Task] | None = None, engine=None):
        super().__init__()
        self.lora = hasattr(policy, "disable_adapter")  # a peft model
        unsupported = method.required - NEEDS
        if unsupported:
            raise CreditBenchError(f"method needs {sorted(unsupported)}, which this engine cannot compute")
        if "hidden_residual" in method.required and not self.lora:
            raise CreditBenchError("method needs hidden_residual (adapter-on vs adapter-off hidden states): "
                                   "train with LoRA (set model.lora.rank > 0)")
        if method.required & REFERENCE_NEEDS and ref_policy is None and not self.lora:
            raise CreditBenchError("method needs the reference policy but none was given (and the policy has no LoRA adapter)")
        self.automatic_optimization = False
        self.policy, self.ref_policy, self.tokenizer = policy, ref_policy, tokenizer
        policy.train()  # from_pretrained returns models in eval mode
        if ref_policy is not None:
            ref_policy.requires_grad_(False).eval()
        self.method, self.task, self.task_name, self.rl, self.eval_cfg = method, task, task_name, rl, eval_cfg
        self.engine = engine if engine is not None else HFRolloutEngine(policy, tokenizer)
        self.eval_tasks = eval_tasks or {task_name: task}  # evaluated in this order; the first is the primary
        # filled at the end of each eval epoch from every process's results (see on_validation_epoch_end)
        self.eval_metrics = {name: PassAtK(eval_cfg.k, sync_on_compute=False) for name in self.eval_tasks}
        self.rl_step = 0  # completed RL steps
        self.samples = 0  # completions generated for training
        self.tokens = 0  # completion tokens generated for training
        self.eval_history: list[dict[str, Any]] = []
        self._verify_s, self._gen_rounds, self._kept_groups = 0.0, 1, None
        self._eval_extra: dict[str, dict[str, list]] = {}
        self._probe: tuple[RolloutBatch, int] | None = None
        self._seed: int | None = None  # the run's seed, read at the first setup (see setup)
        self.skipped_updates = 0  # updates skipped for a non-finite loss or gradient
        self.sink = None  # a bench.engine.checkpoint.MetricSink when the run checkpoints; else metrics go to the logger
        self.resumed_from: int | None = None  # the RL step of the checkpoint this run resumed from
        self.last_checkpoint_step: int | None = None  # the RL step of the last checkpoint written or loaded
        self.wall_before = 0.0  # seconds spent by earlier processes of a resumed run
        self.t_start = time.perf_counter()  # when this process's part of the run started
        # a checkpoint holds only the weights that train: the frozen base (and reference) come from
        # the base checkpoint, so they are missing from it on purpose
        self.strict_loading = False

    def setup(self, stage: str) -> None:
        """With several processes, give each its own sampling stream, the run's seed plus its rank:
        Lightning seeds them all alike, and equal draws would correlate different prompts' rollouts."""
        if rank():
            if self._seed is None:
                self._seed = torch.initial_seed()
            torch.manual_seed(self._seed + rank())

    def on_train_start(self) -> None:
        if self.resumed_from is not None and hasattr(self.engine, "sync"):  # a separate engine: the restored weights
            self.engine.sync(self.policy)

    @property
    def prompts_here(self) -> int:
        """Prompts this process rolls out per RL step: its share of ``rl.prompts_per_step``."""
        return self.rl.prompts_per_step // world_size()

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self):
        rl = self.rl
        params = [p for p in self.policy.parameters() if p.requires_grad]  # the adapter only, under LoRA
        # the fused kernel: one pass over all parameters (7x faster a step than the per-tensor loop on CPU)
        fused = all(p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.bfloat16, torch.float16)
                    for p in params)
        opt = torch.optim.AdamW(params, lr=rl.lr, betas=rl.betas, weight_decay=rl.weight_decay, fused=fused)
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
    def rollout(self, rows: list[dict], n: int, sampling, details: bool,
                task: Task | None = None) -> tuple[RolloutBatch, list[dict]]:
        task = task or self.task
        prompts = [task.prompt(r, self.tokenizer) for r in rows]
        gen = self.engine.generate(prompts, n, sampling)
        expanded = [r for r in rows for _ in range(n)]
        t = time.perf_counter()
        outcomes = task.verify(gen.texts, expanded, details=details)
        self._verify_s += time.perf_counter() - t
        batch = RolloutBatch(
            prompt_ids=gen.prompt_ids, prompt_mask=gen.prompt_mask,
            completion_ids=gen.completion_ids, completion_mask=gen.completion_mask,
            group_ids=torch.arange(len(rows), device=gen.completion_ids.device).repeat_interleave(n),
            rewards=torch.tensor([o.reward for o in outcomes], dtype=torch.float32, device=self.device),
            correct=torch.tensor([o.correct for o in outcomes], device=self.device),
            truncated=gen.truncated, max_new_tokens=sampling.max_new_tokens,
            prompts=[p for p in prompts for _ in range(n)], completions=gen.texts, rows=expanded,
            extra={} if gen.logprobs is None else {"rollout_logprobs": gen.logprobs},  # for the mismatch check
        )
        return batch, [{"parsed": o.parsed, "correct_flexible": o.correct_flexible} for o in outcomes]

    def _count(self, batch: RolloutBatch) -> None:
        """Training samples and generated tokens consumed (every generation counts, kept or not)."""
        self.samples += batch.size
        self.tokens += int(batch.lengths.sum())

    def train_rollouts(self, rows: list[dict]) -> tuple[RolloutBatch, RolloutBatch]:
        """The step's training batch, refilled with fresh prompts while the method drops groups
        (``keep_groups``), for at most ``generation_rounds`` rollout batches. Returns (the batch to
        train on, every rollout generated this step) -- the latter for the reward statistics."""
        rl, n = self.rl, self.prompts_here
        batch, _ = self.rollout(rows, rl.group_size, rl.sampling, details=False)
        self._count(batch)
        generated, kept = [batch], []
        for round_ in range(self.method.generation_rounds):
            if round_ > 0:
                batch, _ = self.rollout(self.trainer.datamodule.refill(n), rl.group_size, rl.sampling, details=False)
                self._count(batch)
                batch.group_ids = batch.group_ids + round_ * n  # distinct from earlier rounds'
                generated.append(batch)
            keep = self.method.keep_groups(batch)
            if keep is None:
                return batch, batch
            kept.append(batch.select(torch.nonzero(keep[batch.group_ids]).squeeze(-1)))
            self._kept_groups = sum(int(k.group_ids.unique().numel()) for k in kept if k.size)
            if self._kept_groups >= n:
                break
        self._gen_rounds = len(generated)
        everything = _regroup(RolloutBatch.concat(generated))
        kept = [k for k in kept if k.size]
        if not kept:  # nothing to learn from this step; train on all (zero advantage) rather than skip
            return everything, everything
        train = _regroup(RolloutBatch.concat(kept))
        first = torch.nonzero(train.group_ids < n).squeeze(-1)  # at most a full batch
        return train.select(first), everything

    # Sampler protocol (bench.core.Sampler), for methods that generate more rollouts themselves.
    def complete(self, batch: RolloutBatch, index: torch.Tensor, prefixes: list[torch.Tensor]) -> RolloutBatch:
        idx = index.tolist()
        sub = batch.select(index)
        budget = batch.max_new_tokens
        sequences = [torch.cat([batch.prompt_ids[i][batch.prompt_mask[i].bool()], p.to(batch.prompt_ids)])
                     for i, p in zip(idx, prefixes)]
        room = max(1, budget - min(len(p) for p in prefixes))
        gen = self.engine.generate_ids(sequences, room, self.rl.sampling)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        from bench.engine.rollout import completion_mask

        comps = [torch.cat([p.to(gen.completion_ids), g])[:budget] for p, g in zip(prefixes, gen.completion_ids)]
        ids = torch.full((len(idx), budget), pad, dtype=comps[0].dtype, device=comps[0].device)
        for j, c in enumerate(comps):
            ids[j, : len(c)] = c
        mask, truncated = completion_mask(ids, eos)
        ids = ids.masked_fill(mask == 0, pad)
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        t = time.perf_counter()
        outcomes = self.task.verify(texts, sub.rows, details=False)
        self._verify_s += time.perf_counter() - t
        sub.completion_ids, sub.completion_mask, sub.truncated, sub.completions = ids, mask, truncated, texts
        if "rollout_logprobs" in sub.extra:  # the engine's log-probs of the continuation; none for the forced prefix
            lp = torch.full(ids.shape, math.nan, device=ids.device)
            for j, p in enumerate(prefixes):
                g = gen.logprobs[j][: budget - len(p)]
                lp[j, len(p) : len(p) + len(g)] = g
            sub.extra["rollout_logprobs"] = lp
        sub.rewards = torch.tensor([o.reward for o in outcomes], dtype=torch.float32, device=self.device)
        sub.correct = torch.tensor([o.correct for o in outcomes], device=self.device)
        sub.max_new_tokens = budget
        self.samples += len(idx)
        prefix_len = torch.tensor([len(p) for p in prefixes], device=mask.device)
        self.tokens += int((mask.sum(-1) - prefix_len).clamp(min=0).sum())  # generated, not forced, tokens
        return sub

    def _forward(self, model, b: RolloutBatch, with_entropy: bool, **kw):
        return score(model, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask,
                     self.rl.sampling.temperature or 1.0, with_entropy, **kw)

    def _reference(self):
        """The reference policy: the base model with the adapter disabled under LoRA, else the frozen copy."""
        if self.lora:
            @contextlib.contextmanager
            def disabled():
                with self.policy.disable_adapter():
                    yield self.policy
            return disabled()
        return contextlib.nullcontext(self.ref_policy)

    @torch.no_grad()
    def score_batch(self, batch: RolloutBatch, fused: bool) -> None:
        """Fill what the method needs that the training forward cannot provide."""
        req = self.method.required
        hidden = "hidden_residual" in req
        pol = None
        if not fused or "ref_kl" in req:
            pol = self._forward(self.policy, batch, with_entropy=True, with_logits="ref_kl" in req, with_hidden=hidden)
            batch.old_logprobs, batch.entropy = pol.logprobs, pol.entropy
        if req & REFERENCE_NEEDS:
            with self._reference() as ref:
                r = self._forward(ref, batch, with_entropy="ref_entropy" in req, with_logits="ref_kl" in req,
                                  with_hidden=hidden)
            batch.ref_logprobs = r.logprobs
            batch.ref_entropy = r.entropy
            if "ref_kl" in req:  # exact KL(pi_old || pi_ref) over the vocabulary at each position
                logp, logq = torch.log_softmax(pol.logits, -1), torch.log_softmax(r.logits, -1)
                batch.ref_kl = (logp.exp() * (logp - logq)).sum(-1)
            if hidden:
                self._hidden_off = r
                if pol is not None:
                    _set_residual(batch, pol, r)

    def update(self, batch: RolloutBatch, fused: bool) -> dict[str, float]:
        """PPO epochs x minibatches of optimizer steps on ``batch``, this process's groups of the step.

        With W processes a minibatch is the union of every process's minibatch of the same index:
        the aggregation divides by that global minibatch's token and sequence counts, and the loss
        differentiated is W times this process's part, because DDP averages the processes'
        gradients. Their average is then the gradient of the global minibatch's loss, as one
        process holding all of it computes. In one process both are exactly today's arithmetic.
        """
        opt, sched = self.optimizers(), self.lr_schedulers()
        cfg, rl, world = self.method.config, self.rl, world_size()
        hidden = "hidden_residual" in self.method.required
        credit = None if fused else self.method.credit(batch)
        acc: dict[str, list[float]] = {}
        diagnostics: dict[str, float] = {}
        for epoch in range(rl.ppo_epochs):
            order = torch.randperm(batch.size, device=self.device) if rl.minibatches > 1 else None
            for mb_index in range(rl.minibatches):
                if order is None:
                    mb, idx = batch, None
                else:
                    idx = order.tensor_split(rl.minibatches)[mb_index]
                    mb = batch.select(idx)
                # with_entropy only when fused: otherwise the scoring pass had it
                s = self._forward(self.policy, mb, with_entropy=fused, with_hidden=fused and hidden)
                if fused:  # single on-policy update: behaviour = current policy, ratio == 1
                    batch.old_logprobs, batch.entropy = s.logprobs.detach(), s.entropy
                    if hidden:
                        _set_residual(batch, s, self._hidden_off)
                    credit = self.method.credit(batch)
                c = credit if idx is None else credit[idx]
                out = self.method.loss(mb, s.logprobs, c)
                counts = all_sum(torch.stack([mb.completion_mask.sum(), mb.completion_mask.new_tensor(mb.size)]))
                norm = {"max_len": batch.max_new_tokens, "num_tokens": counts[0], "num_seqs": float(counts[1])}
                method_loss = aggregate(out.loss, mb.completion_mask, cfg.aggregation, **norm)
                loss = method_loss
                if epoch == 0 and mb_index == 0:  # before any update: ratio 1, so this is the credit as designed
                    grad = torch.autograd.grad(method_loss, s.logprobs, retain_graph=True, allow_unused=True)[0]
                    grad = torch.zeros_like(s.logprobs) if grad is None else grad
                    diagnostics = credit_diagnostics(-grad, mb.completion_mask)
                if cfg.kl_coef > 0:
                    kl = k3_kl(s.logprobs, mb.ref_logprobs)
                    loss = loss + cfg.kl_coef * aggregate(kl, mb.completion_mask, cfg.aggregation, **norm)
                    acc.setdefault("loss/kl", []).append(float(masked_mean(kl.detach(), mb.completion_mask)))
                opt.zero_grad(set_to_none=True)
                self.manual_backward(loss * world)  # DDP divides the sum of the processes' gradients by W
                gn = torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], rl.grad_clip or float("inf"))
                # every process must agree: after DDP's all-reduce the norm is the same everywhere, the loss is not
                finite = bool(all_sum(torch.stack([(~loss.detach().isfinite()).float(), (~gn.isfinite()).float()])
                                      .sum().reshape(1))[0] == 0)
                if finite:
                    opt.step()
                else:
                    self._skip_update(float(loss.detach()), float(gn))
                sched.step()  # the schedule follows the steps taken or skipped
                if finite:
                    acc.setdefault("loss/total", []).append(float(loss.detach()) * world)  # its process mean: the loss
                    acc.setdefault("train/grad_norm", []).append(float(gn))
                for k, v in out.stats.items():
                    acc.setdefault(f"train/{k}", []).append(float(masked_mean(v.detach(), mb.completion_mask)))
        stats = {k: float(np.mean(v)) for k, v in acc.items()}
        stats["train/skipped_updates"] = float(self.skipped_updates)
        mask = batch.completion_mask
        stats["train/entropy"] = float(masked_mean(batch.entropy, mask))
        stats["credit/abs_mean"] = float(masked_mean(credit.abs(), mask))
        stats.update(diagnostics)
        stats["train/lr"] = float(sched.get_last_lr()[0])
        return stats

    def _skip_update(self, loss: float, grad_norm: float) -> None:
        """A non-finite loss or gradient: drop the gradients, leave the weights and AdamW's state as
        they are, count it, and stop the run once ``rl.max_skipped_updates`` is exceeded."""
        import warnings

        self.optimizers().zero_grad(set_to_none=True)
        self.skipped_updates += 1
        what = f"loss {loss:g}, gradient norm {grad_norm:g}"
        if self.skipped_updates > self.rl.max_skipped_updates:
            raise CreditBenchError(
                f"{self.skipped_updates} updates skipped for a non-finite loss or gradient (the last at RL step "
                f"{self.rl_step + 1}: {what}), more than rl.max_skipped_updates={self.rl.max_skipped_updates}; "
                f"the weights were never updated with them -- lower rl.lr or check the method's options")
        warnings.warn(f"RL step {self.rl_step + 1}: non-finite {what}; update skipped, weights unchanged "
                      f"({self.skipped_updates} skipped so far, at most rl.max_skipped_updates="
                      f"{self.rl.max_skipped_updates})", RuntimeWarning, stacklevel=2)

    def training_step(self, rows: list[dict], batch_idx: int) -> None:
        rl = self.rl
        self._verify_s, self._gen_rounds, self._kept_groups = 0.0, 1, None
        counted = self.samples, self.tokens
        t0 = time.perf_counter()
        batch, generated = self.train_rollouts(rows)
        batch = self.method.augment(batch, self)
        # every process's generations count: the budget then stops all of them at the same step
        step = all_sum(torch.tensor([self.samples - counted[0], self.tokens - counted[1]], device=self.device))
        self.samples, self.tokens = counted[0] + int(step[0]), counted[1] + int(step[1])
        if hasattr(self.engine, "sleep"):  # a colocated engine frees the GPU until the next sync
            self.engine.sleep()
        t1 = time.perf_counter()
        fused = rl.ppo_epochs == 1 and rl.minibatches == 1
        self.score_batch(batch, fused)
        t2 = time.perf_counter()
        stats = self.update(batch, fused)
        t3 = time.perf_counter()
        if hasattr(self.engine, "sync"):  # a separate engine samples the next step with the new weights
            self.engine.sync(self.policy)
            stats["time/sync_s"] = time.perf_counter() - t3
        if "rollout_logprobs" in batch.extra:  # the train/inference mismatch, on the behaviour log-probs
            stats.update(rollout_mismatch(batch.old_logprobs, batch.extra["rollout_logprobs"], batch.completion_mask))

        self.rl_step += 1
        lengths = generated.lengths.float()
        mixed = _group_max(generated.rewards, generated.group_ids) != -_group_max(-generated.rewards, generated.group_ids)
        stats.update({
            "train/reward": float(generated.rewards.mean()),
            "train/accuracy": float(generated.correct.float().mean()),
            "train/response_length": float(lengths.mean()),
            "train/truncated_frac": float(generated.truncated.float().mean()),
            "train/mixed_group_frac": float(mixed.float().mean()),
            "train/batch_size": float(batch.size),
            "train/samples": float(self.samples),
            "train/tokens": float(self.tokens),
            "time/rollout_s": t1 - t0 - self._verify_s,
            "time/verify_s": self._verify_s,
            "time/score_s": t2 - t1,
            "time/update_s": t3 - t2,
            "time/step_s": time.perf_counter() - t0,
        })
        if self._kept_groups is not None:
            stats["train/generation_rounds"] = float(self._gen_rounds)
            stats["train/kept_groups"] = float(self._kept_groups)
        # with several processes: the mean of each process's statistic (over equal shares of the
        # step's prompts), the sum of the batch sizes
        stats = mean_over_processes(stats, sums=("train/batch_size", "train/kept_groups"))
        self._log(stats)
        self.log("reward", stats["train/reward"], prog_bar=True, logger=False, batch_size=batch.size)
        if self.budget_spent or self.rl_step >= rl.steps:
            self.trainer.should_stop = True

    @property
    def budget_spent(self) -> bool:
        """Whether the run's sample or token budget (``rl.budget_*``; 0 is none) is used up."""
        rl = self.rl
        return bool((rl.budget_samples and self.samples >= rl.budget_samples)
                    or (rl.budget_tokens and self.tokens >= rl.budget_tokens))

    # ------------------------------------------------------------------ evaluation
    def on_validation_epoch_start(self) -> None:
        self._verify_s = 0.0
        for metric in self.eval_metrics.values():
            metric.reset()
        self._eval_extra = {name: {"correct": [], "lengths": [], "truncated": [], "flex": [], "samples": []}
                            for name in self.eval_tasks}

    def validation_step(self, rows: list[dict], batch_idx: int, dataloader_idx: int = 0) -> None:
        n = self.eval_cfg.n
        name = list(self.eval_tasks)[dataloader_idx]
        batch, info = self.rollout(rows, n, self.eval_cfg.sampling, details=True, task=self.eval_tasks[name])
        ex = self._eval_extra[name]
        ex["correct"].append(batch.correct.view(len(rows), n).cpu())  # [problems, n]
        ex["lengths"].extend(batch.lengths.tolist())
        ex["truncated"].extend(batch.truncated.tolist())
        ex["flex"].extend(bool(i["correct_flexible"]) for i in info)
        if len(ex["samples"]) < self.rl.samples_to_log:
            for j in range(0, batch.size, n):  # one completion per problem
                ex["samples"].append({"prompt": batch.prompts[j], "completion": batch.completions[j],
                                      "parsed": info[j]["parsed"], "reward": float(batch.rewards[j]),
                                      "answer": rows[j // n]["answer"]})

    def on_validation_epoch_end(self) -> None:
        entry: dict[str, Any] = {"step": self.rl_step, "samples": self.samples, "tokens": self.tokens, "eval": {}}
        # every process's chunk of the eval sets, in rank order: each set in its own order again
        parts = gather_objects(self._eval_extra)
        for name, metric in self.eval_metrics.items():
            ex = {k: [x for part in parts for x in part[name][k]] for k in self._eval_extra[name]}
            for correct in ex["correct"]:
                metric.update(correct)
            res = metric.compute()
            lengths = np.array(ex["lengths"], dtype=float)
            n_correct = res["pass_at_1"] * res["num_problems"] * self.eval_cfg.n
            res["mean_length"] = float(lengths.mean())
            res["truncated_frac"] = float(np.mean(ex["truncated"]))
            res["flexible_avg_at_n"] = float(np.mean(ex["flex"]))
            res["tokens_per_correct"] = float(lengths.sum() / n_correct) if n_correct > 0 else float("nan")
            metrics = {metric_key("eval", name, k): v for k, v in res.items()}
            metrics[metric_key("eval", name, "samples")] = float(self.samples)
            metrics[metric_key("eval", name, "tokens")] = float(self.tokens)
            self._log(metrics)
            entry["eval"][name] = {**res, "per_problem_pass_at_1": metric.per_problem()[1].tolist()}
            if ex["samples"] and isinstance(self.logger, MLFlowLogger):
                table = {k: [x[k] for x in ex["samples"][: self.rl.samples_to_log]] for k in ex["samples"][0]}
                folder = "completions" if name == self.task_name else f"completions/{name}"
                self._table(f"{folder}/step_{self.rl_step:06d}.json", table)
        self.eval_history.append(entry)
        self.log("eval_pass_at_1", entry["eval"][next(iter(self.eval_tasks))]["pass_at_1"], prog_bar=True, logger=False,
                 sync_dist=True)  # the same value in every process (the results were gathered)

    # ------------------------------------------------------------------ credit probe
    @torch.no_grad()
    def make_probe(self, rows: list[dict], seed: int = 1234) -> bool:
        """Fix one group of completions to show each method's credit on: the first of ``rows`` whose
        G samples (drawn with a fixed seed) mix correct and wrong answers. With the same base policy
        every method gets the same group, so their credit maps are comparable. Returns whether one was found."""
        with torch.random.fork_rng(devices=self._rng_devices()):
            torch.manual_seed(seed)
            for row in rows:
                batch, _ = self.rollout([row], self.rl.group_size, self.rl.sampling, details=False)
                if batch.rewards.max() > batch.rewards.min():
                    self._probe = (batch, int(torch.argmin(batch.rewards)))
                    return True
        return False

    def _rng_devices(self) -> list[int]:
        return [self.device.index or 0] if self.device.type == "cuda" else []

    def credit_probe(self) -> dict[str, Any] | None:
        """This method's effective credit (-dL/d log pi, as in the credit/* diagnostics) on the probe
        group's first best completion, under the current policy: token texts and one value each.
        The probe group is its own batch: batch-wide statistics are its own in every process."""
        if self._probe is None:
            return None
        with local():
            return self._credit_probe()

    def _credit_probe(self) -> dict[str, Any]:
        batch, row = self._probe
        batch = dataclasses.replace(batch, extra=dict(batch.extra))
        counters = self.samples, self.tokens
        with torch.random.fork_rng(devices=self._rng_devices()):
            torch.manual_seed(4321)
            batch = self.method.augment(batch, self)  # e.g. IBPO's repairs (not counted as training samples)
        self.samples, self.tokens = counters
        self.score_batch(batch, fused=False)
        credit = self.method.credit(batch)
        s = self._forward(self.policy, batch, with_entropy=False)
        cfg = self.method.config
        out = self.method.loss(batch, s.logprobs, credit)
        loss = aggregate(out.loss, batch.completion_mask, cfg.aggregation, max_len=batch.max_new_tokens)
        grad = torch.autograd.grad(loss, s.logprobs, allow_unused=True)[0]
        grad = torch.zeros_like(s.logprobs) if grad is None else grad
        valid = batch.completion_mask[row].bool()
        ids = batch.completion_ids[row][valid].tolist()
        return {"prompt": batch.prompts[row], "completion": batch.completions[row],
                "completion_tokens": [self.tokenizer.decode([i]) for i in ids],
                "reward": float(batch.rewards[row]), "credit": (-grad[row][valid]).float().tolist()}

    def _log(self, metrics: dict[str, float]) -> None:
        clean = {k: v for k, v in metrics.items() if v is not None and math.isfinite(v)}
        if self.sink is not None:
            self.sink.log(clean, self.rl_step)
        elif self.logger is not None:
            self.logger.log_metrics(clean, step=self.rl_step)

    def _table(self, artifact_file: str, data: dict[str, list]) -> None:
        if self.sink is not None:
            self.sink.table(artifact_file, data)
        else:
            self.logger.experiment.log_table(self.logger.run_id, data=data, artifact_file=artifact_file)

    # ------------------------------------------------------------------ checkpoints (see bench.engine.checkpoint)
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from bench.engine.checkpoint import rng_states

        trainable = {f"{n}" for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}
        probe = None
        if self._probe is not None:
            b, row = self._probe
            probe = ({f.name: getattr(b, f.name) for f in dataclasses.fields(b)}, row)
        checkpoint["creditbench"] = {
            "rl_step": self.rl_step, "samples": self.samples, "tokens": self.tokens,
            "eval_history": self.eval_history, "skipped_updates": self.skipped_updates, "probe": probe,
            "rng": gather_objects(rng_states()), "sink": self.sink.state_dict() if self.sink is not None else None,
            "wall_s": self.wall_before + time.perf_counter() - self.t_start,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        from bench.engine.checkpoint import set_rng_states

        own = dict(self.named_parameters())
        stray = [k for k in checkpoint["state_dict"] if k not in own]
        missing = [n for n, p in own.items() if p.requires_grad and n not in checkpoint["state_dict"]]
        if stray or missing:
            raise CreditBenchError(f"the checkpoint does not fit this model ({len(stray)} unknown and {len(missing)} "
                                   f"missing trainable tensors, e.g. {(stray or missing)[0]!r})")
        c = checkpoint["creditbench"]
        self.rl_step, self.samples, self.tokens = c["rl_step"], c["samples"], c["tokens"]
        self.eval_history, self.skipped_updates = c["eval_history"], c["skipped_updates"]
        self.resumed_from = self.last_checkpoint_step = self.rl_step
        self.wall_before = c["wall_s"]
        if c["probe"] is not None:
            fields, row = c["probe"]
            self._probe = (RolloutBatch(**fields), row)
        if self.sink is not None and c["sink"] is not None:
            self.sink.load_state_dict(c["sink"])
        set_rng_states(c["rng"][rank()] if len(c["rng"]) == world_size() else c["rng"][0])


def _regroup(batch: RolloutBatch) -> RolloutBatch:
    """Renumber group ids 0..n-1 in order of first appearance (after concatenating or filtering)."""
    _, inverse = torch.unique_consecutive(batch.group_ids, return_inverse=True)
    batch.group_ids = inverse
    return batch


def _group_max(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:  # [num_groups]
    n = int(group_ids.max()) + 1
    return torch.full((n,), -math.inf, dtype=values.dtype, device=values.device).scatter_reduce(
        0, group_ids, values, reduce="amax")


def _set_residual(batch: RolloutBatch, on, off) -> None:
    """ARCA's salience input: ||h_adapter_on - h_adapter_off||_2 per token, after and before the final norm."""
    batch.hidden_residual = (on.hidden - off.hidden).float().norm(dim=-1)
    if on.hidden_pre is not None and off.hidden_pre is not None:
        batch.extra["hidden_residual_prenorm"] = (on.hidden_pre - off.hidden_pre).float().norm(dim=-1)
