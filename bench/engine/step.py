"""One RL step's optimisation, as plain functions of the policy, the method and the batch: the
optimizer and its schedule, and the PPO update (epochs x minibatches of loss, backward, clip and
step). What the update needs scored first is :mod:`bench.engine.scoring`.

Nothing here needs a Trainer: the update takes an :class:`Optimization` -- the optimizer and schedule
to step and the ``backward`` to call (the LightningModule's ``manual_backward``, or
``Tensor.backward`` in a script).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from bench.config import RLConfig
from bench.core import LossOutput, Method, RolloutBatch
from bench.distributed import all_sum, clip_grad_norm, world_size
from bench.engine import microbatch
from bench.engine.diagnostics import credit_diagnostics
from bench.engine.scoring import Scored, Scores, forward, set_residual
from bench.errors import CreditBenchError
from bench.numerics import aggregate, k3_kl, masked_mean


def make_optimizer(policy, rl: RLConfig) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the parameters that train (the adapter only, under LoRA) and its schedule per
    optimizer step: linear warmup, then cosine, linear or constant over every step of the run."""
    params = [p for p in policy.parameters() if p.requires_grad]
    # the fused kernel: one pass over all parameters (7x faster a step than the per-tensor loop on CPU)
    fused = all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.bfloat16, torch.float16) for p in params
    )
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

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class SkippedUpdates:
    """Updates skipped for a non-finite loss or gradient: the gradients are dropped, the weights and
    AdamW's state left as they are, and the run stops once more than ``limit`` were skipped."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0

    def skip(self, optimizer, loss: float, grad_norm: float, step: int) -> None:
        """Skip the update of RL step ``step`` (1-based, for the messages)."""
        optimizer.zero_grad(set_to_none=True)
        self.count += 1
        what = f"loss {loss:g}, gradient norm {grad_norm:g}"
        if self.count > self.limit:
            raise CreditBenchError(
                f"{self.count} updates skipped for a non-finite loss or gradient (the last at RL step {step}: "
                f"{what}), more than rl.max_skipped_updates={self.limit}; the weights were never updated with "
                f"them -- lower rl.lr or check the method's options"
            )
        warnings.warn(
            f"RL step {step}: non-finite {what}; update skipped, weights unchanged ({self.count} skipped "
            f"so far, at most rl.max_skipped_updates={self.limit})",
            RuntimeWarning,
            stacklevel=4,
        )


class _Means:
    """Masked means of per-token statistics over one optimizer step's micro-batches: with one
    micro-batch exactly ``masked_mean``, else the sums and counts of every part added up."""

    def __init__(self):
        self.parts: dict[str, list[tuple[Tensor, Tensor]]] = {}

    def add(self, key: str, value: Tensor, mask: Tensor) -> None:
        self.parts.setdefault(key, []).append((value.detach(), mask))

    def means(self) -> dict[str, float]:
        out = {}
        for key, parts in self.parts.items():
            if len(parts) == 1:
                out[key] = float(masked_mean(*parts[0]))
            else:
                total = sum(float((v * m.to(v.dtype)).sum()) for v, m in parts)
                out[key] = total / max(sum(float(m.sum()) for _, m in parts), 1.0)
        return out


@dataclass
class Optimization:
    """How :func:`update` takes its optimizer steps: the optimizer and its schedule (stepped per
    optimizer step), the ``backward`` to call, the count of updates skipped so far (a fresh one with
    ``rl.max_skipped_updates`` when None), and ``no_sync`` (DDP's, FSDP's): a context that holds back
    the gradient all-reduce, entered for every micro-batch of a minibatch but the last."""

    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    backward: Callable[[Tensor], None] = Tensor.backward
    skips: SkippedUpdates | None = None
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    first_gradient: FirstGradient | None = None


class FirstGradient:
    """An update's first minibatch gradient, computed once and handed to other updates that would
    compute exactly the same one: from the same weights, on the same scored batch, with the same method
    and options but the learning rate, under the same seed (the credit probe's arms of one label at
    several rates; the rate acts only at the optimizer step). The first update to ask computes it and
    keeps every parameter's gradient (before clipping), what the step logs and torch's RNG state after
    it; a later one loads them instead of computing. That it is the same is the caller's promise;
    ``tests/engine/test_first_gradient.py`` holds the updates to the bit against computing each."""

    def __init__(self) -> None:
        self.saved: tuple[_Gradient, list[Tensor | None], Tensor] | None = None

    def take(self, policy, compute: Callable[[], _Gradient]) -> _Gradient:
        params = list(policy.parameters())
        if self.saved is None:
            g = compute()
            grads = [None if p.grad is None else p.grad.clone() for p in params]
            self.saved = (g, grads, torch.get_rng_state())
            return g
        g, grads, rng = self.saved
        for p, saved in zip(params, grads, strict=True):
            p.grad = None if saved is None else saved.clone()
        torch.set_rng_state(rng)
        return g


def update(
    policy, method: Method, batch: RolloutBatch, rl: RLConfig, *, opt: Optimization, scored: Scored, step: int = 1
) -> dict[str, float]:
    """PPO epochs x minibatches of optimizer steps on ``batch`` (as :func:`score_batch` left it:
    ``scored``), this process's groups of RL step ``step``; the step's statistics.

    With W processes a minibatch is the union of every process's minibatch of the same index:
    the aggregation divides by that global minibatch's token and sequence counts, and the loss
    differentiated is W times this process's part, because DDP averages the processes'
    gradients. Their average is then the gradient of the global minibatch's loss, as one
    process holding all of it computes. In one process both are exactly today's arithmetic.

    Under a token budget (``rl.micro_batch_tokens``, see :mod:`bench.engine.microbatch`) each
    minibatch's gradient accumulates over its micro-batches, normalised by the same global counts,
    before its one optimizer step.
    """
    skips = opt.skips if opt.skips is not None else SkippedUpdates(rl.max_skipped_updates)
    credit = None if scored.fused else method.credit(batch)
    log = _Log()
    for epoch in range(rl.ppo_epochs):
        for index, (mb, rows) in enumerate(_minibatches(batch, rl)):
            s = None
            if scored.fused:  # single on-policy update: behaviour = current policy, ratio == 1
                s = _training_forward(policy, method, batch, rl, scored.adapter_off)
                credit = method.credit(batch)
            c = credit if rows is None else credit[rows]
            method.on_minibatch(mb)
            first = epoch == 0 and index == 0  # before any update: ratio 1, so this is the credit as designed
            m = _Minibatch(mb, c, trained=s, first=first, on_policy=first and scored.from_rollout)
            if first and opt.first_gradient is not None and not scored.fused:
                grads = opt.first_gradient.take(policy, lambda m=m: _gradient(policy, method, m, rl=rl, opt=opt))
            else:
                grads = _gradient(policy, method, m, rl=rl, opt=opt)
            finite, grad_norm = _optimizer_step(opt, skips, grads.total, rl, step)
            log.add(grads, finite, grad_norm)
    return log.stats(batch, credit, skips, opt.scheduler)


def _minibatches(batch: RolloutBatch, rl: RLConfig) -> Iterator[tuple[RolloutBatch, Tensor | None]]:
    """One epoch's minibatches, each with its rows of ``batch`` (None: the whole batch), in a fresh
    random order each epoch."""
    if rl.minibatches == 1:
        yield batch, None
        return
    order = torch.randperm(batch.size, device=batch.completion_mask.device)
    for rows in order.tensor_split(rl.minibatches):
        yield batch.select(rows), rows


def _training_forward(policy, method: Method, batch: RolloutBatch, rl: RLConfig, adapter_off: Scores | None) -> Scores:
    """A fused update's training forward, which also gives the batch what scoring left out: the
    behaviour log-probs (detached) and entropies, ARCA's residual against ``adapter_off``, the hidden
    states."""
    residual = "hidden_residual" in method.required and adapter_off is not None
    states = "hidden_states" in method.required
    s = forward(policy, batch, rl, with_entropy=True, with_hidden=residual or states)
    batch.old_logprobs, batch.entropy = s.logprobs.detach(), s.entropy
    if residual:
        set_residual(batch, s, adapter_off)
    if states:
        batch.hidden_states = s.hidden
    return s


@dataclass
class _Gradient:
    """One minibatch's gradient, accumulated over its parts: the summed loss, what it logs, and the
    credit diagnostics (its first minibatch only)."""

    total: float = 0.0
    means: _Means = field(default_factory=_Means)
    scalars: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)

    def add(self, loss: float, out: LossOutput, part: RolloutBatch) -> None:
        """One part's loss and what its method's loss output logs (``out.stats`` as token means,
        ``out.scalars`` per call, weighted by the part's rows)."""
        self.total += loss
        for k, v in out.stats.items():
            self.means.add(f"train/{k}", v, part.completion_mask)
        for k, v in out.scalars.items():
            self.scalars.setdefault(f"train/{k}", []).append((float(v), part.size))


@dataclass(frozen=True)
class _Minibatch:
    """One minibatch of the update: its rows of the batch and their credit, its training forward when
    the update is fused (``trained``, already run: then it goes in one part), and whether it is the
    update's first (before any step, so its credit diagnostics are the credit as designed)."""

    batch: RolloutBatch
    credit: Tensor  # [b, T]
    trained: Scores | None
    first: bool
    on_policy: bool = False
    """The behaviour log-probs are the rollout's and the policy has not moved: each part's own forward
    (detached) gives them, so every ratio is exactly 1, as where a scoring pass gave them. The rollout's
    differ from the forward's in float rounding, and a loss whose two branches tie at ratio 1 (a trace's
    current-token clip, which gives the history its gradient at the tie) would take either branch by it."""


@dataclass(frozen=True)
class _Part:
    """One backward of a minibatch's gradient: ``rows`` of the minibatch (None: all of it, unselected),
    their batch and credit, and whether it is the minibatch's last (whose backward all-reduces)."""

    batch: RolloutBatch
    credit: Tensor  # [b, T]
    rows: Tensor | None
    last: bool


def _gradient(policy, method: Method, m: _Minibatch, *, rl: RLConfig, opt: Optimization) -> _Gradient:
    """Zero the gradients and backpropagate ``m``'s loss, one micro-batch at a time under the token
    budget (all parts normalised by the whole minibatch's global counts), in one part when the update is
    fused or the minibatch fits the budget. On the first minibatch, the credit diagnostics of the
    gradient with respect to each token's log-prob."""
    split = _micro_batches(m, rl)
    counts = None if split is None else _minibatch_counts(method, m.batch, m.credit)
    grad_lp = torch.zeros_like(m.batch.completion_mask, dtype=torch.float32) if m.first and split is not None else None
    g, world = _Gradient(), world_size()
    opt.optimizer.zero_grad(set_to_none=True)  # the parts' gradients add up to this minibatch's alone
    for part in _parts(m, split):
        s = (
            m.trained
            if m.trained is not None
            else forward(policy, part.batch, rl, with_entropy=False, with_hidden=False)
        )
        if m.on_policy:  # a copy: the batch itself keeps the rollout's (a shared first gradient skips this)
            part = replace(part, batch=replace(part.batch, old_logprobs=s.logprobs.detach()))
        out = method.loss(part.batch, s.logprobs, part.credit)
        mask = _loss_mask(out, part.batch)  # [b, T]
        if counts is None:  # the minibatch in one part: the global counts of its own loss mask
            counts = _global_counts(mask, out, part.batch)
        norm = {"max_len": m.batch.max_new_tokens, "num_tokens": counts[0], "num_seqs": float(counts[1])}
        loss = aggregate(out.loss, mask, method.config.aggregation, **norm)
        if m.first:
            grad = torch.autograd.grad(loss, s.logprobs, retain_graph=True, allow_unused=True)[0]
            grad = torch.zeros_like(s.logprobs) if grad is None else grad
            if grad_lp is None:
                g.diagnostics = credit_diagnostics(-grad, m.batch.completion_mask)
            else:
                grad_lp[part.rows] = grad
        if method.config.kl_coef > 0:
            kl = k3_kl(s.logprobs, part.batch.ref_logprobs)
            kl_mask = mask if out.kl_mask is None else out.kl_mask.to(mask.dtype)  # a placebo's: the method's own
            loss = loss + method.config.kl_coef * aggregate(kl, kl_mask, method.config.aggregation, **norm)
            g.means.add("loss/kl", kl, part.batch.completion_mask)
        with contextlib.nullcontext() if part.last else opt.no_sync():
            opt.backward(loss * world)  # DDP divides the sum of the processes' gradients by W
        g.add(float(loss.detach()), out, part.batch)
    if grad_lp is not None:
        g.diagnostics = credit_diagnostics(-grad_lp, m.batch.completion_mask)
    return g


def _micro_batches(m: _Minibatch, rl: RLConfig) -> list[Tensor] | None:
    """The rows of each of ``m``'s micro-batches under the token budget, or None when it goes in one
    part: a fused update (its training forward has run on the whole batch) or a minibatch that fits."""
    if m.trained is not None:
        return None
    split = microbatch.split(m.batch, rl.micro_batch_tokens)
    return split if len(split) > 1 else None


def _parts(m: _Minibatch, split: list[Tensor] | None) -> Iterator[_Part]:
    """``m``'s parts in order, each micro-batch selected when it is reached (one held at a time)."""
    if split is None:
        yield _Part(m.batch, m.credit, rows=None, last=True)
        return
    for i, rows in enumerate(split):
        yield _Part(m.batch.select(rows), m.credit[rows], rows=rows, last=i == len(split) - 1)


@torch.no_grad()
def _minibatch_counts(method: Method, mb: RolloutBatch, credit: Tensor) -> Tensor:
    """The whole minibatch's global (token, row) counts under the method's loss mask, taken before any
    part's backward (see :mod:`bench.engine.microbatch`)."""
    whole = method.loss(mb, mb.old_logprobs, credit)
    return _global_counts(_loss_mask(whole, mb), whole, mb)


def _loss_mask(out: LossOutput, batch: RolloutBatch) -> Tensor:
    """The tokens a loss counts (``out.mask``, else every completion token), as the completion mask's dtype."""
    return batch.completion_mask if out.mask is None else out.mask.to(batch.completion_mask.dtype)  # [b, T]


def _global_counts(mask: Tensor, out: LossOutput, batch: RolloutBatch) -> Tensor:
    """Every process's (token, row) counts of ``batch`` under ``mask`` (its :func:`_loss_mask`): a row
    counts when the loss's own mask leaves it a token, every row when the loss has none."""
    rows_left = mask.new_tensor(batch.size) if out.mask is None else (mask.sum(-1) > 0).sum()
    return all_sum(torch.stack([mask.sum(), rows_left]))


def _optimizer_step(
    opt: Optimization, skips: SkippedUpdates, total: float, rl: RLConfig, step: int
) -> tuple[bool, float]:
    """Clip the gradient and step, unless the loss or the gradient norm is non-finite on any process
    (then the update is skipped); the schedule steps either way. Returns (stepped, gradient norm)."""
    gn = clip_grad_norm(opt.optimizer.param_groups[0]["params"], rl.grad_clip or float("inf"))
    # every process must agree: after DDP's all-reduce the norm is the same everywhere, the loss is not
    bad = torch.stack([gn.new_tensor(float(not math.isfinite(total))), (~gn.isfinite()).float()])
    finite = bool(all_sum(bad.sum().reshape(1))[0] == 0)
    if finite:
        opt.optimizer.step()
    else:
        skips.skip(opt.optimizer, total, float(gn), step)
    opt.scheduler.step()  # the schedule follows the steps taken or skipped
    return finite, float(gn)


class _Log:
    """The update's statistics: per optimizer step, then their means over the steps."""

    def __init__(self):
        self.acc: dict[str, list[float]] = {}
        self.diagnostics: dict[str, float] = {}

    def add(self, g: _Gradient, stepped: bool, grad_norm: float) -> None:
        if stepped:
            self.acc.setdefault("loss/total", []).append(g.total * world_size())  # its process mean: the loss
            self.acc.setdefault("train/grad_norm", []).append(grad_norm)
        for k, v in g.means.means().items():
            self.acc.setdefault(k, []).append(v)
        for k, vs in g.scalars.items():
            mean = vs[0][0] if len(vs) == 1 else sum(v * n for v, n in vs) / sum(n for _, n in vs)
            self.acc.setdefault(k, []).append(mean)
        self.diagnostics = self.diagnostics or g.diagnostics

    def stats(self, batch: RolloutBatch, credit: Tensor, skips: SkippedUpdates, scheduler) -> dict[str, float]:
        stats = {k: float(np.mean(v)) for k, v in self.acc.items()}
        stats["train/skipped_updates"] = float(skips.count)
        mask = batch.completion_mask
        stats["train/entropy"] = float(masked_mean(batch.entropy, mask))
        stats["credit/abs_mean"] = float(masked_mean(credit.abs(), mask))
        stats.update(self.diagnostics)
        stats["train/lr"] = float(scheduler.get_last_lr()[0])
        return stats
