"""Blame alignment: how much of a method's effective credit lands on the token where a failed answer
first went wrong.

A task that can tell where a wrong answer went wrong says so in its verdict (``Outcome.blame``: the
character offset of the first wrong character of the completion). On a fixed probe set of failed
completions, sampled once from the base policy in groups whose rewards mix (so the advantage is not
zero), the method's effective credit c_t = -dL/d log pi(y_t) (:func:`bench.engine.credit_map.effective_credit`)
is compared with the blame token b of each row, over its L valid tokens:

    share      = |c_b| / sum_t |c_t|                     1 all on the blame token, 1/L uniform
    rank       = 1 + #{t: |c_t| > |c_b|} + #{t != b: |c_t| = |c_b|} / 2
    rank_frac  = (rank - 1) / (L - 1)                    0 the most credited token, 0.5 chance
    top1       = share of rows with rank 1               (the blame token alone the most credited)
    uniform_share = mean 1/L                             what uniform credit gives

The rank counts a tie as half a token ahead (the mid-rank), so uniform credit ranks at chance
(rank_frac 0.5) rather than first. Each value is the mean over the probe's failed rows that receive
any credit (``n`` of them); the whole probe is one batch, its groups scored jointly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from bench.config import RLConfig
from bench.core import Method, RolloutBatch
from bench.engine.credit_map import effective_credit
from bench.engine.sampling import RolloutSampler
from bench.engine.seeding import seeded

TIE_RTOL = 1e-6
"""Credits within this fraction of a row's largest |credit| of the blame token's count as equal."""


def char_to_token(tokenizer, ids: list[int], offset: int) -> int | None:
    """The index into the completion tokens ``ids`` of the token holding character ``offset`` of
    their decoded text (special tokens decode to nothing). An offset at the end of the text is the
    token after it (the eos), when there is one; None past that. Each token's end is the length of
    the decoded prefix that ends with it, which is right also for tokenizers that decode a lone
    token differently (a sentencepiece word's leading space)."""
    start, after = 0, None
    for i in range(len(ids)):
        end = len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True))
        if end > offset:
            return i
        if after is None and end == offset == start:  # decodes to nothing where the text may end
            after = i
        start = end
    return after


def blame_tokens(sampler: RolloutSampler, batch: RolloutBatch) -> list[int | None]:
    """Each row's blame token (:func:`char_to_token` of its verdict's ``blame``); None where the row is
    correct or the task cannot tell. The rows are verified again: a rollout keeps only the reward."""
    outcomes = sampler.task.verify(batch.completions, batch.rows, details=True)
    out: list[int | None] = []
    for i, o in enumerate(outcomes):
        offset = getattr(o, "blame", None)
        ids = batch.completion_ids[i][batch.completion_mask[i].bool()].tolist()
        out.append(None if offset is None or o.correct else char_to_token(sampler.tokenizer, ids, offset))
    return out


@dataclass
class BlameProbe:
    """The probe set: whole groups (a group-normalised advantage needs the group) and, among their
    rows, the failed ones with a blame token."""

    batch: RolloutBatch
    rows: list[int]
    """Indices into ``batch`` of the failed rows that have a blame token."""
    tokens: list[int]
    """Each of those rows' blame token (an index into its completion tokens)."""


@torch.no_grad()
def find_blame_probe(
    sampler: RolloutSampler,
    rows: list[dict],
    rl: RLConfig,
    devices: list[int],
    seed: int = 2468,
    max_rows: int = 48,
    chunk: int = 4,
) -> BlameProbe | None:
    """Sample G completions of each of ``rows`` (``chunk`` prompts at a time, with a fixed ``seed``, the
    RNGs of the CPU and of ``devices`` left as they were) until ``max_rows`` failed completions with a
    blame are found in groups whose rewards mix, or ``rows`` run out; None when there are none."""
    groups, found = [], 0
    with seeded(seed, devices):
        for start in range(0, len(rows), chunk):
            batch, _ = sampler.rollout(rows[start : start + chunk], rl.group_size, rl.sampling, details=False)
            blame = blame_tokens(sampler, batch)
            for g in range(int(batch.group_ids.max()) + 1):
                idx = torch.nonzero(batch.group_ids == g).squeeze(-1).tolist()
                rewards = batch.rewards[idx]
                failed = [(j, blame[i]) for j, i in enumerate(idx) if blame[i] is not None]
                if rewards.max() > rewards.min() and failed:
                    groups.append((batch.select(torch.tensor(idx)), failed))
                    found += len(failed)
            if found >= max_rows:
                break
    if not groups:
        return None
    batch = RolloutBatch.concat([b for b, _ in groups])
    batch.group_ids = torch.arange(len(groups), device=batch.group_ids.device).repeat_interleave(rl.group_size)
    flagged, offset = [], 0
    for b, failed in groups:
        flagged += [(offset + j, t) for j, t in failed]
        offset += b.size
    flagged = flagged[:max_rows]
    return BlameProbe(batch, [r for r, _ in flagged], [t for _, t in flagged])


def blame_probe_state(probe: BlameProbe | None) -> dict[str, Any] | None:
    """The probe as a checkpoint holds it: the batch's fields (plain tensors and lists), rows, tokens."""
    if probe is None:
        return None
    batch = {f.name: getattr(probe.batch, f.name) for f in dataclasses.fields(probe.batch)}
    return {"batch": batch, "rows": probe.rows, "tokens": probe.tokens}


def blame_probe_from_state(state: dict[str, Any] | None) -> BlameProbe | None:
    return None if state is None else BlameProbe(RolloutBatch(**state["batch"]), state["rows"], state["tokens"])


def alignment(credit: torch.Tensor, mask: torch.Tensor, rows: list[int], tokens: list[int]) -> dict[str, float]:
    """The blame-alignment numbers (module docstring) of the credit ``[B, T]`` (valid where ``mask``)
    on ``rows``, whose blame tokens are ``tokens``; rows without any credit are left out."""
    share, rank, rank_frac, top1, uniform = [], [], [], [], []
    for r, b in zip(rows, tokens):
        c = credit[r][mask[r].bool()].abs().double()  # [L]
        L, total = len(c), float(c.sum())
        if b >= L or total <= 0:
            continue
        tol = TIE_RTOL * float(c.max())
        above = int((c > c[b] + tol).sum())
        ties = int(((c - c[b]).abs() <= tol).sum()) - 1  # the blame token itself not counted
        rk = 1 + above + ties / 2
        share.append(float(c[b]) / total)
        rank.append(rk)
        rank_frac.append((rk - 1) / (L - 1) if L > 1 else 0.0)
        top1.append(float(rk == 1))
        uniform.append(1 / L)
    if not share:
        return {"n": 0.0}
    values = {"share": share, "rank": rank, "rank_frac": rank_frac, "top1": top1, "uniform_share": uniform}
    return {**{k: sum(v) / len(v) for k, v in values.items()}, "n": float(len(share))}


def blame_alignment(
    policy,
    ref_policy,
    method: Method,
    sampler: RolloutSampler,
    rl: RLConfig,
    probe: BlameProbe,
    devices: list[int],
) -> dict[str, float]:
    """The method's blame alignment (module docstring) on ``probe`` under the current policy, the
    whole probe scored as one batch."""
    batch, credit = effective_credit(policy, ref_policy, method, sampler, rl, probe.batch, devices)
    return alignment(credit, batch.completion_mask, probe.rows, probe.tokens)
