"""The exact objective J of a task whose problems have one right completion each.

For such a task (``Task.reference(row)`` is not None: chain, decisive, items, arithmetic) the
probability that the policy samples the reference completion, end of sequence included, is one
teacher-forced forward pass:

    J(theta) = 1/N sum_i p_theta(r_i | x_i) = 1/N sum_i prod_t pi_theta(r_i,t | x_i, r_i,<t)

over the N problems ``rows`` (prompt x_i, reference r_i), with the token probabilities at the
sampling temperature. J is "strict pass@1": every step of the completion right, not only the boxed
answer; sampled pass@1 also counts a right final answer after a wrong step. It has no sampling noise
and is differentiable, so one update's effect on it is measured exactly (bench.paired) and its
gradient is defined. Held by ``tests/engine/test_exact.py``: J equals the product of the reference's
token probabilities computed one token at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.core import Task
from bench.engine.scoring import score


@dataclass
class References:
    """The tokenized prompts (left-padded) and reference completions (right-padded, eos appended)."""

    prompt_ids: Tensor  # [N, P]
    prompt_mask: Tensor  # [N, P]
    completion_ids: Tensor  # [N, T]
    completion_mask: Tensor  # [N, T]

    def to(self, device) -> References:
        return References(*(t.to(device) for t in (self.prompt_ids, self.prompt_mask, self.completion_ids,
                                                    self.completion_mask)))  # fmt: skip


def has_references(task: Task, rows: list[dict]) -> bool:
    """Whether every row of ``task`` has one right completion (J is defined)."""
    return bool(rows) and all(task.reference(r) is not None for r in rows)


def references(task: Task, rows: list[dict], tokenizer) -> References:
    """Each row's prompt and reference completion as token ids (as the rollout engine tokenizes them)."""
    prompts = tokenizer([task.prompt(r, tokenizer) for r in rows], add_special_tokens=False)["input_ids"]
    refs = tokenizer([task.reference(r) for r in rows], add_special_tokens=False)["input_ids"]
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    P, T = max(map(len, prompts)), max(map(len, refs)) + 1
    prompt_ids = torch.tensor([[pad] * (P - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([r + [eos] + [pad] * (T - len(r) - 1) for r in refs])
    completion_mask = torch.tensor([[1] * (len(r) + 1) + [0] * (T - len(r) - 1) for r in refs])
    return References(prompt_ids, prompt_mask, completion_ids, completion_mask)


def reference_logprobs(policy, refs: References, temperature: float = 1.0, batch_size: int = 256) -> Tensor:
    """log p(r_i | x_i) of each reference ``[N]`` (with gradient where grad is enabled), in batches
    of ``batch_size`` rows."""
    device = next(policy.parameters()).device
    refs = refs.to(device)
    out = []
    for start in range(0, refs.prompt_ids.shape[0], batch_size):
        part = slice(start, start + batch_size)
        s = score(
            policy,
            refs.prompt_ids[part],
            refs.prompt_mask[part],
            refs.completion_ids[part],
            refs.completion_mask[part],
            temperature or 1.0,
            with_entropy=False,
        )
        out.append((s.logprobs * refs.completion_mask[part]).sum(-1))  # log prod_t pi(r_t) = sum_t log pi(r_t)
    return torch.cat(out)


def exact_objective(policy, refs: References, temperature: float = 1.0) -> tuple[float, Tensor]:
    """(J, each problem's p(r_i | x_i) ``[N]``) under ``policy``'s current weights, without gradient."""
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            p = reference_logprobs(policy, refs, temperature).exp()
    finally:
        policy.train(was_training)
    return float(p.double().mean()), p.cpu()


def objective_gradient(policy, refs: References, temperature: float = 1.0) -> list[Tensor]:
    """dJ/dtheta for each trainable parameter of ``policy`` (zeros where J does not depend on it)."""
    params = [p for p in policy.parameters() if p.requires_grad]
    with torch.enable_grad():
        j = reference_logprobs(policy, refs, temperature).exp().mean()
        grads = torch.autograd.grad(j, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads)]


def eval_reference_probs(policy, task: Task, rows: list[dict], tokenizer, *, temperature: float) -> list[float]:
    """Each of ``rows``' p(r_i | x_i) at an eval point (its mean is the eval's ``ref_prob``, J; see
    bench.engine.metrics.EvalEpoch), or [] where a row has no reference. A forward pass, no sampling:
    it draws no random number, so logging J moves no sampled number of a run (tests/engine/test_exact.py)."""
    if not has_references(task, rows):
        return []
    return exact_objective(policy, references(task, rows, tokenizer), temperature)[1].tolist()
