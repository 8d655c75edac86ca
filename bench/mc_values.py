"""Monte-Carlo values of a completion's states and each step's advantage, under the sampler's policy.

A completion y is cut into steps s_0 .. s_{S-1} (a new step starts at each ``delimiter``; None: one step).
The states are the prompt (k = 0) and the prompt followed by the first k steps; from each of the first
``max_value_steps`` + 1 states, K continuations are sampled (``Sampler.complete``, counted as extra samples)
and verified, and

    V_k = mean of the K rewards                  (k = 0 .. min(S - 1, max_value_steps))
    V_S = 0;  V_k = r_k + V_{k+1} beyond those   (r_k = 0 except r_{S-1} = R(y), the completion's reward)
    A_k = r_k + V_{k+1} - V_k                    (the advantage of step k)

every token of step k gets A_k (the step holding its first character). Identical states (a group's shared
prompt, equal prefixes) are estimated once. With enough continuations A_k is the true advantage of the step
under the policy: VinePPO trains on it (methods/vineppo.py) and the credit probe's oracle arm puts a twin's
credit where it says (bench.engine.oracle).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from bench.core import RolloutBatch, Sampler


@dataclass
class StepValues:
    """A batch's Monte-Carlo estimates: each token's step advantage and step, each row's values and SEs."""

    advantage: Tensor  # [B, T] A_k of the step holding each completion token (0 outside the completion)
    step: Tensor  # [B, T] long, each token's step index (-1 outside the completion)
    values: Tensor  # [B, max_value_steps + 2] the estimated V_k (NaN where not estimated)
    se: Tensor  # [B, max_value_steps + 2] each estimate's Monte-Carlo SE, sd of its K rewards / sqrt(K)


def step_values(
    batch: RolloutBatch, sampler: Sampler, rollouts: int, delimiter: str | None, max_value_steps: int
) -> StepValues:
    """Estimate the value of every state of every completion of ``batch`` by ``rollouts`` verified
    continuations each, and each token's step advantage."""
    starts = sampler.token_starts(batch)
    steps = [token_steps(text, s, delimiter) for text, s in zip(batch.completions, starts)]
    states = value_states(batch, steps, max_value_steps)  # (row, k, prefix length) to estimate
    values, errors = estimate(batch, sampler, states, rollouts)  # {(row, k): V_k}, {(row, k): SE}
    B, T = batch.completion_mask.shape
    adv = torch.zeros(B, T)
    step_of = torch.full((B, T), -1, dtype=torch.long)
    table = torch.full((B, max_value_steps + 2), float("nan"))
    se = torch.full_like(table, float("nan"))
    for i, st in enumerate(steps):
        S = (max(st) + 1) if st else 0
        v = [values.get((i, k)) for k in range(S)]
        a = step_advantages(v, float(batch.rewards[i]))
        for t, k in enumerate(st):
            adv[i, t], step_of[i, t] = a[k], k
        for k, x in enumerate(v[: table.shape[1]]):
            table[i, k] = float("nan") if x is None else x
            se[i, k] = errors.get((i, k), float("nan"))
    device = batch.completion_mask.device
    return StepValues(adv.to(device), step_of.to(device), table.to(device), se.to(device))


def split_steps(text: str, delimiter: str) -> list[int]:
    """The character offsets where the steps of ``text`` start, and its length last: [0, ..., len(text)].
    A step after the first starts with its delimiter; whitespace-only pieces at either end join their
    neighbour (official GSM8K: leading empty steps merge into the first non-empty one)."""
    pieces = text.split(delimiter)
    idx, pos = [0], 0
    for j, piece in enumerate(pieces):
        pos += len(piece) + (len(delimiter) if j else 0)
        idx.append(pos)
    bounds = idx[1:-1]  # the ends of every piece but the last
    keep = [b for j, b in enumerate(bounds) if text[:b].strip() and text[b:].strip()]
    return [0, *keep, len(text)]


def token_steps(text: str, starts: list[int], delimiter: str | None) -> list[int]:
    """Each completion token's step (the step holding its first character), numbered 0, 1, ... over the steps
    some token starts in; ``delimiter`` None: the completion is one step."""
    if delimiter is None:
        return [0] * len(starts)
    bounds = split_steps(text, delimiter)[1:-1]
    raw = [sum(c >= b for b in bounds) for c in starts]
    order = {k: j for j, k in enumerate(dict.fromkeys(raw))}  # a step no token starts in joins the one before
    return [order[k] for k in raw]


def value_states(batch: RolloutBatch, steps: list[list[int]], max_value_steps: int) -> list[tuple[int, int, int]]:
    """(row, k, prefix tokens) of each state whose value is estimated: the prompt (k = 0) and the state after
    each of the first steps but the last (the last's value is its reward), up to ``max_value_steps``."""
    out = []
    for i, st in enumerate(steps):
        S = (max(st) + 1) if st else 0
        for k in range(min(S, max_value_steps + 1)):
            out.append((i, k, st.index(k) if k else 0))
    return out


def estimate(
    batch: RolloutBatch, sampler: Sampler, states: list[tuple[int, int, int]], K: int
) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """V of each state, the mean reward of K continuations of its prefix, and its Monte-Carlo SE (the sd of
    the K rewards / sqrt(K); NaN for K = 1), each distinct state (prompt and prefix tokens) sampled once."""
    key = {}
    for i, k, n in states:
        prompt = tuple(batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist())
        key[(i, k)] = (prompt, tuple(batch.completion_ids[i, :n].tolist()))
    first = {}
    for (i, k), kk in key.items():
        first.setdefault(kk, (i, k))
    unique = list(first.items())
    if not unique:
        return {}, {}
    rows = torch.tensor([first_state[0] for _, first_state in unique for _ in range(K)])
    prefixes = [torch.tensor(kk[1], dtype=torch.long) for kk, _ in unique for _ in range(K)]
    done = sampler.complete(batch, rows.to(batch.completion_ids.device), prefixes, extra=True)
    rewards = done.rewards.float().view(len(unique), K)
    sd = rewards.std(-1) if K > 1 else torch.full((len(unique),), float("nan"))
    mean = {kk: m for (kk, _), m in zip(unique, rewards.mean(-1).tolist())}
    err = {kk: e for (kk, _), e in zip(unique, (sd / K**0.5).tolist())}
    return {st: mean[kk] for st, kk in key.items()}, {st: err[kk] for st, kk in key.items()}


def step_advantages(values: list[float | None], reward: float) -> list[float]:
    """A_k = r_k + V_{k+1} - V_k with V_S = 0, r only at the last step (the reward), and the values not
    estimated (None) filled from the end as V_k = r_k + V_{k+1} (the official ``_compute_step_advantages``)."""
    S = len(values)
    r = [0.0] * S
    if S:
        r[-1] = reward
    v = [*values, 0.0]
    for k in range(S - 1, -1, -1):
        if v[k] is None:
            v[k] = r[k] + v[k + 1]
    return [r[k] + v[k + 1] - v[k] for k in range(S)]
