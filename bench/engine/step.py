"""One RL step's optimisation, as plain functions of the policy, the method and the batch: the
optimizer and its schedule, scoring (what the method needs beyond the training forward) and the
PPO update (epochs x minibatches of loss, backward, clip and step).

Nothing here needs a Trainer: the update takes the ``backward`` to call (the LightningModule's
``manual_backward``, or ``Tensor.backward`` in a script) and the optimizer and schedule to step.
Under LoRA (a peft model) the reference policy is the base model with the adapter disabled, so the
reference forward and ARCA's adapter-off hidden states are one pass. With a single on-policy update
(1 epoch, 1 minibatch: ``fused``) the behaviour log-probs and entropies come from the training
forward itself (detached), so no separate scoring forward is spent; the ratio is then exactly 1,
as in on-policy GRPO.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from bench.config import RLConfig
from bench.core import NEEDS, Method, RolloutBatch
from bench.distributed import all_sum, clip_grad_norm, world_size
from bench.engine import microbatch
from bench.engine.diagnostics import credit_diagnostics
from bench.engine.policy import Scores, score
from bench.errors import CreditBenchError
from bench.numerics import aggregate, k3_kl, masked_mean

REFERENCE_NEEDS = frozenset({"ref_logprobs", "ref_entropy", "ref_kl", "hidden_residual", "hidden_residual_separate"})


def check_method(method: Method, policy, ref_policy) -> None:
    """Refuse a method whose ``needs`` the step cannot compute for this policy, saying what to change."""
    lora = hasattr(policy, "disable_adapter")  # a peft model: the reference is the adapter-off pass
    unsupported = method.required - NEEDS
    if unsupported:
        raise CreditBenchError(f"method needs {sorted(unsupported)}, which this engine cannot compute")
    if method.required & {"hidden_residual", "hidden_residual_separate"} and not lora:
        raise CreditBenchError(
            "method needs hidden_residual (adapter-on vs adapter-off hidden states): "
            "train with LoRA (set model.lora.rank > 0)"
        )
    if method.required & REFERENCE_NEEDS and ref_policy is None and not lora:
        raise CreditBenchError(
            "method needs the reference policy but none was given (and the policy has no LoRA adapter)"
        )


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


def forward(model, batch: RolloutBatch, rl: RLConfig, with_entropy: bool, **kw) -> Scores:
    """``model``'s log-probs (and what ``kw`` asks for) of the batch's completions, at the sampling temperature."""
    return score(
        model,
        batch.prompt_ids,
        batch.prompt_mask,
        batch.completion_ids,
        batch.completion_mask,
        rl.sampling.temperature or 1.0,
        with_entropy,
        **kw,
    )


def reference(policy, ref_policy):
    """The reference policy: the base model with the adapter disabled under LoRA, else the frozen copy."""
    if hasattr(policy, "disable_adapter"):

        @contextlib.contextmanager
        def disabled():
            with policy.disable_adapter():
                yield policy

        return disabled()
    return contextlib.nullcontext(ref_policy)


@torch.no_grad()
def score_batch(policy, ref_policy, method: Method, batch: RolloutBatch, rl: RLConfig, fused: bool) -> Scores | None:
    """Fill what the method needs that the training forward cannot provide. Returns the adapter-off
    forward when the method needs ``hidden_residual`` and the update is ``fused``: the residual is then
    taken against the training forward, so hand it to :func:`update`; else None.

    Under a token budget (``rl.micro_batch_tokens``) the passes run one micro-batch at a time and
    their outputs are written back into the batch's tensors (a fused update never splits)."""
    parts = microbatch.split(batch, 0 if fused else rl.micro_batch_tokens)
    if len(parts) == 1:
        return _score_part(policy, ref_policy, method, batch, rl, fused)
    for index in parts:
        part = batch.select(index)
        _score_part(policy, ref_policy, method, part, rl, fused=False)
        microbatch.write_back(batch, part, index)
    return None


def _score_part(policy, ref_policy, method: Method, batch: RolloutBatch, rl: RLConfig, fused: bool) -> Scores | None:
    req = method.required
    separate = "hidden_residual_separate" in req  # the adapter-on states from their own pass even when fused
    hidden = "hidden_residual" in req or separate
    pol = None
    if not fused or "ref_kl" in req or separate:
        with_hidden = hidden or "hidden_states" in req
        pol = forward(policy, batch, rl, with_entropy=True, with_logits="ref_kl" in req, with_hidden=with_hidden)
        batch.old_logprobs, batch.entropy = pol.logprobs, pol.entropy
        if "hidden_states" in req:
            batch.hidden_states = pol.hidden
    if not req & REFERENCE_NEEDS:
        return None
    with reference(policy, ref_policy) as ref:
        r = forward(ref, batch, rl, with_entropy="ref_entropy" in req, with_logits="ref_kl" in req, with_hidden=hidden)
    batch.ref_logprobs = r.logprobs
    batch.ref_entropy = r.entropy
    if "ref_kl" in req:  # exact KL(pi_old || pi_ref) over the vocabulary at each position
        logp, logq = torch.log_softmax(pol.logits, -1), torch.log_softmax(r.logits, -1)
        batch.ref_kl = (logp.exp() * (logp - logq)).sum(-1)
    if hidden and pol is not None:
        set_residual(batch, pol, r)
    return r if hidden and fused and not separate else None


def is_fused(batch: RolloutBatch, rl: RLConfig) -> bool:
    """Whether the update is one on-policy optimizer step whose training forward also gives the
    behaviour log-probs (no scoring pass): one epoch, one minibatch, and the batch in one micro-batch
    on every process (they agree, so every process runs the same passes)."""
    if rl.ppo_epochs != 1 or rl.minibatches != 1:
        return False
    split = len(microbatch.split(batch, rl.micro_batch_tokens)) > 1
    return not bool(all_sum(torch.tensor([float(split)], device=batch.completion_mask.device))[0])


def set_residual(batch: RolloutBatch, on: Scores, off: Scores) -> None:
    """ARCA's salience input: ||h_adapter_on - h_adapter_off||_2 per token, after and before the final norm."""
    batch.hidden_residual = (on.hidden - off.hidden).float().norm(dim=-1)
    if on.hidden_pre is not None and off.hidden_pre is not None:
        batch.extra["hidden_residual_prenorm"] = (on.hidden_pre - off.hidden_pre).float().norm(dim=-1)


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
            stacklevel=3,
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


def update(
    policy,
    method: Method,
    batch: RolloutBatch,
    rl: RLConfig,
    optimizer,
    scheduler,
    backward: Callable[[Tensor], None],
    fused: bool,
    hidden_off: Scores | None = None,
    *,
    skips: SkippedUpdates | None = None,
    step: int = 1,
    no_sync: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """PPO epochs x minibatches of optimizer steps on ``batch`` (scored by :func:`score_batch` with the
    same ``fused``, whose return is ``hidden_off``), this process's groups of RL step ``step``.

    With W processes a minibatch is the union of every process's minibatch of the same index:
    the aggregation divides by that global minibatch's token and sequence counts, and the loss
    differentiated is W times this process's part, because DDP averages the processes'
    gradients. Their average is then the gradient of the global minibatch's loss, as one
    process holding all of it computes. In one process both are exactly today's arithmetic.

    Under a token budget (``rl.micro_batch_tokens``, see :mod:`bench.engine.microbatch`) each
    minibatch's gradient accumulates over its micro-batches, normalised by the same global counts,
    before its one optimizer step; ``no_sync`` (DDP's, FSDP's) holds back the gradient all-reduce for
    every micro-batch but the last.
    """
    cfg, world = method.config, world_size()
    skips = skips if skips is not None else SkippedUpdates(rl.max_skipped_updates)
    # from the training forward when fused: the residual against the adapter-off pass, the hidden states
    hidden = "hidden_residual" in method.required and hidden_off is not None
    states = "hidden_states" in method.required
    credit = None if fused else method.credit(batch)
    acc: dict[str, list[float]] = {}
    diagnostics: dict[str, float] = {}
    for epoch in range(rl.ppo_epochs):
        order = torch.randperm(batch.size, device=batch.completion_mask.device) if rl.minibatches > 1 else None
        for mb_index in range(rl.minibatches):
            if order is None:
                mb, idx = batch, None
            else:
                idx = order.tensor_split(rl.minibatches)[mb_index]
                mb = batch.select(idx)
            s = None
            if fused:  # single on-policy update: behaviour = current policy, ratio == 1
                s = forward(policy, mb, rl, with_entropy=True, with_hidden=hidden or states)
                batch.old_logprobs, batch.entropy = s.logprobs.detach(), s.entropy
                if hidden:
                    set_residual(batch, s, hidden_off)
                if states:
                    batch.hidden_states = s.hidden
                credit = method.credit(batch)
            c = credit if idx is None else credit[idx]
            method.on_minibatch(mb)
            parts = [None] if fused else microbatch.split(mb, rl.micro_batch_tokens)
            if len(parts) == 1:
                parts = [None]
                counted = None
            else:  # the whole minibatch's loss mask, before any part's backward (see bench.engine.microbatch)
                with torch.no_grad():
                    whole = method.loss(mb, mb.old_logprobs, c).mask
                counted = mb.completion_mask if whole is None else whole.to(mb.completion_mask.dtype)
                rows_left = counted.new_tensor(mb.size) if whole is None else (counted.sum(-1) > 0).sum()
                counts = all_sum(torch.stack([counted.sum(), rows_left]))
            first = epoch == 0 and mb_index == 0  # before any update: ratio 1, so this is the credit as designed
            split = counted is not None
            grad_lp = torch.zeros_like(mb.completion_mask, dtype=torch.float32) if first and split else None
            means, total, scalars = _Means(), 0.0, {}
            optimizer.zero_grad(set_to_none=True)  # the parts' gradients add up to this minibatch's alone
            for part_index, pidx in enumerate(parts):
                part, cp = (mb, c) if pidx is None else (mb.select(pidx), c[pidx])
                if s is None or pidx is not None:
                    # with_entropy only when fused: otherwise the scoring pass had it
                    s = forward(policy, part, rl, with_entropy=fused, with_hidden=fused and (hidden or states))
                out = method.loss(part, s.logprobs, cp)
                mask = part.completion_mask if out.mask is None else out.mask.to(part.completion_mask.dtype)  # [b, T]
                if counted is None:
                    rows = mask.new_tensor(part.size) if out.mask is None else (mask.sum(-1) > 0).sum()  # rows left
                    counts = all_sum(torch.stack([mask.sum(), rows]))
                norm = {"max_len": batch.max_new_tokens, "num_tokens": counts[0], "num_seqs": float(counts[1])}
                method_loss = aggregate(out.loss, mask, cfg.aggregation, **norm)
                loss = method_loss
                if first:
                    grad = torch.autograd.grad(method_loss, s.logprobs, retain_graph=True, allow_unused=True)[0]
                    grad = torch.zeros_like(s.logprobs) if grad is None else grad
                    if grad_lp is None:
                        diagnostics = credit_diagnostics(-grad, mb.completion_mask)
                    else:
                        grad_lp[pidx] = grad
                if cfg.kl_coef > 0:
                    kl = k3_kl(s.logprobs, part.ref_logprobs)
                    loss = loss + cfg.kl_coef * aggregate(kl, mask, cfg.aggregation, **norm)
                    means.add("loss/kl", kl, part.completion_mask)
                last = part_index == len(parts) - 1
                with contextlib.nullcontext() if last else no_sync():
                    backward(loss * world)  # DDP divides the sum of the processes' gradients by W
                total += float(loss.detach())
                for k, v in out.stats.items():
                    means.add(f"train/{k}", v, part.completion_mask)
                for k, v in out.scalars.items():  # per call: weighted by the part's rows
                    scalars.setdefault(f"train/{k}", []).append((float(v), part.size))
            if grad_lp is not None:
                diagnostics = credit_diagnostics(-grad_lp, mb.completion_mask)
            gn = clip_grad_norm(optimizer.param_groups[0]["params"], rl.grad_clip or float("inf"))
            # every process must agree: after DDP's all-reduce the norm is the same everywhere, the loss is not
            bad = torch.stack([gn.new_tensor(float(not math.isfinite(total))), (~gn.isfinite()).float()])
            finite = bool(all_sum(bad.sum().reshape(1))[0] == 0)
            if finite:
                optimizer.step()
            else:
                skips.skip(optimizer, total, float(gn), step)
            scheduler.step()  # the schedule follows the steps taken or skipped
            if finite:
                acc.setdefault("loss/total", []).append(total * world)  # its process mean: the loss
                acc.setdefault("train/grad_norm", []).append(float(gn))
            for k, v in means.means().items():
                acc.setdefault(k, []).append(v)
            for k, vs in scalars.items():
                mean = vs[0][0] if len(vs) == 1 else sum(v * n for v, n in vs) / sum(n for _, n in vs)
                acc.setdefault(k, []).append(mean)
    stats = {k: float(np.mean(v)) for k, v in acc.items()}
    stats["train/skipped_updates"] = float(skips.count)
    mask = batch.completion_mask
    stats["train/entropy"] = float(masked_mean(batch.entropy, mask))
    stats["credit/abs_mean"] = float(masked_mean(credit.abs(), mask))
    stats.update(diagnostics)
    stats["train/lr"] = float(scheduler.get_last_lr()[0])
    return stats
