"""Rollout engines: what :class:`RolloutEngine` asks of one, and ``HFRolloutEngine``, which samples with
Hugging Face ``generate`` (KV cache, one batched call for every prompt x sample, each distinct prompt
prefilled once and its KV cache shared by its samples); it is always available and is what the tests
use. The vLLM engine is in :mod:`bench.engine.vllm_engine`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
from torch import Tensor

from bench.config import SamplingConfig
from bench.engine.scoring import shared_prefix_cache


@dataclass
class Generation:
    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P]
    completion_ids: Tensor  # [B, T] right-padded with pad
    completion_mask: Tensor  # [B, T] up to and including the first eos
    truncated: Tensor  # [B] no eos within the budget
    texts: list[str]  # decoded completions, special tokens removed
    logprobs: Tensor | None = None  # [B, T] the engine's log-prob of each sampled token (vLLM), else None


def rollout_mismatch(trainer_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> dict[str, float]:
    """How far the rollout engine's sampled-token log-probs are from the trainer's, over the valid
    tokens of ``mask`` (positions without an engine log-prob, NaN, are skipped): the mean of
    |log pi_trainer - log pi_engine| and the largest probability ratio in either direction,
    exp(max |log pi_trainer - log pi_engine|) (1 when they agree exactly)."""
    diff = (trainer_logprobs.detach().float() - rollout_logprobs.float()).abs()  # [B, T]
    valid = mask.bool() & diff.isfinite()
    if not valid.any():
        return {}
    d = diff[valid]
    return {"rollout/logprob_abs_diff_mean": float(d.mean()), "rollout/prob_ratio_max": float(d.max().exp())}


def completion_mask(completion_ids: Tensor, eos_id: int) -> tuple[Tensor, Tensor]:
    """Mask up to and including the first eos; rows without eos are truncated (all ones)."""
    is_eos = completion_ids == eos_id  # [B, T]
    seen_before = (is_eos.long().cumsum(-1) - is_eos.long()) > 0  # an eos strictly earlier
    return (~seen_before).long(), ~is_eos.any(-1)


class RolloutEngine(Protocol):
    """What the module samples with. An engine that samples from the training policy itself sees every
    update at once; a ``separate`` one holds its own copy of the weights, which ``sync`` refreshes after
    each update (and after a resume), and may free its memory with ``sleep`` from the end of the
    rollouts to the next ``sync``. Both are no-ops for an engine that is not separate."""

    separate: ClassVar[bool]  # holds its own copy of the weights

    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig) -> Generation:
        """``n`` completions for each prompt, as rows p0s0, p0s1, ..., p1s0, ... (grouped)."""
        ...

    def generate_ids(self, sequences: list[Tensor], max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        """One completion for each token-id sequence (e.g. a prompt followed by a forced prefix)."""
        ...

    def sync(self, policy) -> None:
        """Sample from ``policy``'s current weights from now on."""
        ...

    def sleep(self) -> None:
        """Free what the engine holds until the next ``sync`` (the update needs the memory)."""
        ...

    def close(self) -> None:
        """Release the engine for good (its memory and any process-wide state)."""
        ...


class HFRolloutEngine:
    """Samples with the policy's own ``generate``: it sees every update at once, so there is nothing
    to sync, put to sleep or close."""

    separate: ClassVar[bool] = False

    def __init__(self, model, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    def sync(self, policy) -> None:
        pass

    def sleep(self) -> None:
        pass

    def close(self) -> None:
        pass

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingConfig) -> Generation:
        """``n`` completions for each prompt, as rows p0s0, p0s1, ..., p1s0, ... (grouped)."""
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = next(self.model.parameters()).device
        ids = enc["input_ids"].repeat_interleave(n, 0).to(device)
        mask = enc["attention_mask"].repeat_interleave(n, 0).to(device)
        return self._generate(ids, mask, sampling.max_new_tokens, sampling)

    @torch.no_grad()
    def generate_ids(self, sequences: list[Tensor], max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        """One completion for each token-id sequence (e.g. a prompt followed by a forced prefix)."""
        P = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        ids = torch.stack([torch.cat([s.new_full((P - len(s),), pad), s]) for s in sequences])
        mask = torch.stack([torch.cat([s.new_zeros(P - len(s)), torch.ones_like(s)]) for s in sequences])
        return self._generate(ids, mask, max_new_tokens, sampling)

    def _prompt_cache(self, ids: Tensor, mask: Tensor):
        """The KV cache of the prompts' first P-1 tokens, computed once per distinct prompt and
        shared by its rows (n samples per prompt), or None (then ``generate`` prefills every row)."""
        if getattr(self.model.generation_config, "cache_implementation", None) is not None:
            return None
        masked = not bool(mask.all())
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0) if masked else None
        return shared_prefix_cache(self.model, ids, mask, position_ids, masked)

    def _generate(self, ids: Tensor, mask: Tensor, max_new_tokens: int, sampling: SamplingConfig) -> Generation:
        tok = self.tokenizer
        was_training = self.model.training
        self.model.eval()
        greedy = sampling.temperature == 0
        cache = self._prompt_cache(ids, mask)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else sampling.top_k,
            max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
            use_cache=True,
            # each process generates on its own: under FSDP the weights are gathered whole before the
            # rollouts (ShardPlan.gathered), so no per-token sync between processes is needed
            synced_gpus=False,
            **({} if cache is None else {"past_key_values": cache}),
        )
        self.model.train(was_training)
        comp = out[:, ids.shape[1] :]
        cmask, truncated = completion_mask(comp, tok.eos_token_id)
        comp = comp.masked_fill(cmask == 0, tok.pad_token_id)
        texts = tok.batch_decode(comp, skip_special_tokens=True)
        return Generation(ids, mask, comp, cmask, truncated, texts)
