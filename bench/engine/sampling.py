"""Rollouts: the engine samples completions, the task verifies them, and what was generated is
counted (the run's sample and token budgets read the counts).

:class:`RolloutSampler` is the engine's side of :class:`bench.core.Sampler` (the methods that
generate more rollouts themselves call its ``complete``); :func:`train_rollouts` is one RL step's
sampling, refilled with fresh prompts while the method drops groups (dynamic sampling)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.config import EvalConfig, RLConfig, SamplingConfig
from bench.core import Method, RolloutBatch, Task
from bench.distributed import all_sum, world_size
from bench.engine.rollout import RolloutEngine, completion_mask
from bench.engine.scoring import score
from bench.errors import CreditBenchError

BEHAVIOUR = ("behaviour_logprobs", "behaviour_entropy")
"""The keys of ``RolloutBatch.extra`` under which a rollout leaves the sampling policy's log-prob and
entropy of each sampled token (``rl.old_logprobs: rollout``; bench.engine.scoring reads them)."""


class RolloutSampler:
    """Samples with ``engine`` and verifies with ``task`` (or the task a call names). ``samples`` and
    ``tokens`` count the completions and generated tokens that training consumed (the caller counts a
    rollout with :meth:`count`; ``complete`` counts its own), ``verify_s`` the seconds spent in the
    verifier, reported apart from the rollout time."""

    def __init__(self, engine: RolloutEngine, tokenizer, task: Task, sampling: SamplingConfig, policy=None):
        self.engine, self.tokenizer, self.task, self.sampling = engine, tokenizer, task, sampling
        self.policy = policy  # the model ``logprobs`` scores with (the training policy)
        self.samples = 0  # completions generated for training
        self.tokens = 0  # completion tokens generated for training
        self.extra = 0  # completions a method generated for its own use, only verified (Sampler.generate)
        self.verify_s = 0.0

    def rollout(
        self,
        rows: list[dict],
        n: int,
        sampling: SamplingConfig,
        details: bool,
        task: Task | None = None,
        behaviour: bool = False,
    ) -> tuple[RolloutBatch, list[dict]]:
        """``n`` verified completions of each of ``rows`` (groups in row order), and for each the
        verifier's parsed answer and flexible verdict (``details``: the verifier fills them). With
        ``behaviour`` (``rl.old_logprobs: rollout``), the batch's ``extra`` also holds the sampling
        policy's log-prob and entropy of each sampled token (:data:`BEHAVIOUR`), where the engine gave them."""
        task = task or self.task
        prompts = [task.prompt(r, self.tokenizer) for r in rows]
        return self._sample(prompts, rows, n, sampling, details, task, behaviour)

    def _sample(
        self,
        prompts: list[str],
        rows: list[dict],
        n: int,
        sampling: SamplingConfig,
        details: bool,
        task: Task,
        behaviour: bool = False,
    ) -> tuple[RolloutBatch, list[dict]]:
        gen = self.engine.generate(prompts, n, sampling, **({"behaviour": True} if behaviour else {}))
        device = gen.completion_ids.device
        expanded = [r for r in rows for _ in range(n)]
        t = time.perf_counter()
        outcomes = task.verify(gen.texts, expanded, details=details)
        self.verify_s += time.perf_counter() - t
        batch = RolloutBatch(
            prompt_ids=gen.prompt_ids,
            prompt_mask=gen.prompt_mask,
            completion_ids=gen.completion_ids,
            completion_mask=gen.completion_mask,
            group_ids=torch.arange(len(rows), device=device).repeat_interleave(n),
            rewards=torch.tensor([o.reward for o in outcomes], dtype=torch.float32, device=device),
            correct=torch.tensor([o.correct for o in outcomes], device=device),
            truncated=gen.truncated,
            max_new_tokens=sampling.max_new_tokens,
            prompts=[p for p in prompts for _ in range(n)],
            completions=gen.texts,
            rows=expanded,
            extra={} if gen.logprobs is None else {"rollout_logprobs": gen.logprobs},  # for the mismatch check
        )
        if gen.behaviour is not None:
            batch.extra.update(zip(BEHAVIOUR, (gen.behaviour.logprobs, gen.behaviour.entropy)))
        return batch, [{"parsed": o.parsed, "correct_flexible": o.correct_flexible} for o in outcomes]

    def count(self, batch: RolloutBatch, extra: bool = False) -> None:
        """Generated tokens (every generation, kept or not: the token budget) and training samples (the
        sample budget), or for ``extra`` completions a method generates for its own use and only
        verifies (IBPO's revisions) their number apart: the sample budget stays exact."""
        if extra:
            self.extra += batch.size
        else:
            self.samples += batch.size
        self.tokens += int(batch.lengths.sum())

    def gather_counts(self, before: tuple[int, int, int], device) -> None:
        """Add every process's generations since ``before`` (``(samples, tokens, extra)``) to the
        counters of each: the budget then stops all of them at the same step."""
        now = (self.samples, self.tokens, self.extra)
        new = all_sum(torch.tensor([a - b for a, b in zip(now, before)], device=device))
        self.samples, self.tokens, self.extra = (b + int(n) for b, n in zip(before, new))

    def generate(self, prompts: list[str], rows: list[dict]) -> RolloutBatch:
        """bench.core.Sampler: one verified completion of each prompt string, counted as ``extra``."""
        batch, _ = self._sample(prompts, rows, 1, self.sampling, details=False, task=self.task)
        self.count(batch, extra=True)
        return batch

    @torch.no_grad()
    def logprobs(self, batch: RolloutBatch, prompts: list[str]) -> torch.Tensor:  # [B, T]
        """bench.core.Sampler: the batch's completions scored by the policy after other prompts."""
        if self.policy is None:
            raise CreditBenchError("this sampler has no policy to score with (RolloutSampler(policy=...))")
        tokenized = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        encoded = [torch.tensor(e, dtype=torch.long) for e in tokenized]
        P, pad = max(len(e) for e in encoded), self.tokenizer.pad_token_id
        device = batch.completion_ids.device
        ids = torch.stack([torch.cat([e.new_full((P - len(e),), pad), e]) for e in encoded]).to(device)
        mask = torch.stack([torch.cat([e.new_zeros(P - len(e)), torch.ones_like(e)]) for e in encoded]).to(device)
        temperature = self.sampling.temperature or 1.0
        s = score(self.policy, ids, mask, batch.completion_ids, batch.completion_mask, temperature, with_entropy=False)
        return s.logprobs.masked_fill(batch.completion_mask == 0, 0.0)

    def token_starts(self, batch: RolloutBatch) -> list[list[int]]:
        """bench.core.Sampler: each completion token's first character in its decoded completion."""
        out = []
        for ids, n in zip(batch.completion_ids.tolist(), batch.completion_mask.sum(-1).tolist()):
            out.append([len(self.tokenizer.decode(ids[:j], skip_special_tokens=True)) for j in range(int(n))])
        return out

    def complete(
        self, batch: RolloutBatch, index: torch.Tensor, prefixes: list[torch.Tensor], extra: bool = False
    ) -> RolloutBatch:
        """bench.core.Sampler: continue each forced prefix with the policy, within the batch's budget."""
        idx = index.tolist()
        sub = batch.select(index)
        budget = batch.max_new_tokens
        sequences = [
            torch.cat([batch.prompt_ids[i][batch.prompt_mask[i].bool()], p.to(batch.prompt_ids)])
            for i, p in zip(idx, prefixes)
        ]
        room = max(1, budget - min(len(p) for p in prefixes))
        gen = self.engine.generate_ids(sequences, room, self.sampling)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        comps = [torch.cat([p.to(gen.completion_ids), g])[:budget] for p, g in zip(prefixes, gen.completion_ids)]
        ids = torch.full((len(idx), budget), pad, dtype=comps[0].dtype, device=comps[0].device)
        for j, c in enumerate(comps):
            ids[j, : len(c)] = c
        mask, truncated = completion_mask(ids, eos)
        ids = ids.masked_fill(mask == 0, pad)
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        t = time.perf_counter()
        outcomes = self.task.verify(texts, sub.rows, details=False)
        self.verify_s += time.perf_counter() - t
        sub.completion_ids, sub.completion_mask, sub.truncated, sub.completions = ids, mask, truncated, texts
        for key in BEHAVIOUR:  # not the sampling policy's alone (a forced prefix): rescored (NaN: unknown)
            if key in sub.extra:
                sub.extra[key] = torch.full(ids.shape, math.nan, device=ids.device)
        if "rollout_logprobs" in sub.extra:  # the engine's log-probs of the continuation; none for the forced prefix
            lp = torch.full(ids.shape, math.nan, device=ids.device)
            for j, p in enumerate(prefixes):
                g = gen.logprobs[j][: budget - len(p)]
                lp[j, len(p) : len(p) + len(g)] = g
            sub.extra["rollout_logprobs"] = lp
        sub.rewards = torch.tensor([o.reward for o in outcomes], dtype=torch.float32, device=ids.device)
        sub.correct = torch.tensor([o.correct for o in outcomes], device=ids.device)
        sub.max_new_tokens = budget
        if extra:
            self.extra += len(idx)
        else:
            self.samples += len(idx)
        prefix_len = torch.tensor([len(p) for p in prefixes], device=mask.device)
        self.tokens += int((mask.sum(-1) - prefix_len).clamp(min=0).sum())  # generated, not forced, tokens
        return sub


@dataclass
class TrainRollouts:
    """One RL step's sampling."""

    batch: RolloutBatch  # what to train on
    generated: RolloutBatch  # every rollout generated this step, for the reward statistics
    rounds: int = 1  # rollout batches generated
    kept_groups: int | None = None  # groups the method kept; None when it keeps them all (no keep_groups)


def train_rollouts(
    sampler: RolloutSampler,
    method: Method,
    rows: list[dict],
    rl: RLConfig,
    refill: Callable[[int], list[dict]],
    max_rounds: int | None = None,
) -> TrainRollouts:
    """The step's training batch, refilled with ``refill(n)`` fresh prompts while the method drops
    groups (``keep_groups``), for at most ``generation_rounds`` rollout batches and at most
    ``max_rounds`` (what is left of the sample budget or to the next eval point, in rollout batches:
    a refill never passes either); every rollout is counted. ``rows`` are this process's share of the
    step's prompts."""
    n = rl.prompts_per_step // world_size()
    behaviour = records_behaviour(sampler.engine, rl)
    batch, _ = sampler.rollout(rows, rl.group_size, rl.sampling, details=False, behaviour=behaviour)
    sampler.count(batch)
    generated, kept, kept_groups = [batch], [], None
    rounds = method.generation_rounds if max_rounds is None else max(1, min(method.generation_rounds, max_rounds))
    for round_ in range(rounds):
        if round_ > 0:
            batch, _ = sampler.rollout(refill(n), rl.group_size, rl.sampling, details=False, behaviour=behaviour)
            sampler.count(batch)
            batch.group_ids = batch.group_ids + round_ * n  # distinct from earlier rounds'
            generated.append(batch)
        keep = method.keep_groups(batch)
        if keep is None:
            return TrainRollouts(batch, batch, kept_groups=kept_groups)
        kept.append(batch.select(torch.nonzero(keep[batch.group_ids]).squeeze(-1)))
        kept_groups = sum(int(k.group_ids.unique().numel()) for k in kept if k.size)
        if kept_groups >= n:
            break
    everything = regroup(RolloutBatch.concat(generated))
    kept = [k for k in kept if k.size]
    if not kept:  # nothing to learn from this step; train on all (zero advantage) rather than skip
        return TrainRollouts(everything, everything, len(generated), kept_groups)
    train = regroup(RolloutBatch.concat(kept))
    first = torch.nonzero(train.group_ids < n).squeeze(-1)  # at most a full batch
    return TrainRollouts(train.select(first), everything, len(generated), kept_groups)


def records_behaviour(engine: RolloutEngine, rl: RLConfig) -> bool:
    """Whether the training rollouts record the behaviour log-probs (``rl.old_logprobs``): an update
    that is not fused, with an engine that can (the in-process one: ``records_behaviour``)."""
    fused = rl.ppo_epochs == 1 and rl.minibatches == 1  # the training forward gives them
    return rl.old_logprobs != "rescore" and not fused and getattr(engine, "records_behaviour", False)


def rounds_left(samples: int, rl: RLConfig, every_samples: int = 0) -> int | None:
    """Rollout batches a step may generate, having generated ``samples``, before it would pass the sample
    budget or the next multiple of ``every_samples`` (an eval point); at least 1, None without either."""
    ends = [rl.budget_samples] if rl.budget_samples else []
    ends += [(samples // every_samples + 1) * every_samples] if every_samples else []
    if not ends:
        return None
    return max(1, (min(ends) - samples) // (rl.prompts_per_step * rl.group_size))


def eval_due(samples_before: int, samples: int, step: int, eval_cfg: EvalConfig) -> bool:
    """Whether RL step ``step``, which took the samples from ``samples_before`` to ``samples``, is an eval
    point: it reached a multiple of ``eval.every_samples`` (without one, of ``eval.every`` RL steps)."""
    every = eval_cfg.every_samples
    return samples // every > samples_before // every if every else step % eval_cfg.every == 0


def reward_stats(generated: RolloutBatch) -> dict[str, float]:
    """What the step's rollouts earned: every generation, kept for training or not."""
    lengths = generated.lengths.float()
    mixed = _group_max(generated.rewards, generated.group_ids) != -_group_max(-generated.rewards, generated.group_ids)
    return {
        "train/reward": float(generated.rewards.mean()),
        "train/accuracy": float(generated.correct.float().mean()),
        "train/response_length": float(lengths.mean()),
        "train/truncated_frac": float(generated.truncated.float().mean()),
        "train/mixed_group_frac": float(mixed.float().mean()),
    }


def _group_max(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:  # [num_groups]
    n = int(group_ids.max()) + 1
    return torch.full((n,), -math.inf, dtype=values.dtype, device=values.device).scatter_reduce(
        0, group_ids, values, reduce="amax"
    )


def regroup(batch: RolloutBatch) -> RolloutBatch:
    """Renumber group ids 0..n-1 in order of first appearance (after concatenating or filtering)."""
    _, inverse = torch.unique_consecutive(batch.group_ids, return_inverse=True)
    batch.group_ids = inverse
    return batch
