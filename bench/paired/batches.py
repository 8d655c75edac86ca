"""The probe's rollout batches: prompts drawn from the train split and sampled with seeds that depend only
on the probe's seed, the batch and the prompts, so that every arm asking for the same prompts gets the
same samples -- from a cache when the arms share a policy (one batch, every arm), or by common random
numbers when each arm samples from its own (paired segments: the same uniforms, policies that stay close,
mostly the same samples)."""

from __future__ import annotations

import copy
import hashlib

import torch

from bench.config import SamplingConfig
from bench.core import RolloutBatch
from bench.engine.rollout import HFRolloutEngine
from bench.engine.sampling import RolloutSampler
from bench.engine.seeding import seeded


def stream_seed(*parts: object) -> int:
    """A 62-bit seed from ``parts`` (stable across processes and Python's hash randomisation)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**62


class RowStream:
    """The prompts of one probe batch: ``first(n)`` its rows, then ``refill(n)`` fresh ones (a method that
    drops groups refills from here), drawn with replacement from ``rows`` by a seeded generator. Two
    streams with the same seed yield the same rows in the same order."""

    def __init__(self, rows, seed: int):
        self.rows, self.g = rows, torch.Generator().manual_seed(seed)

    def refill(self, n: int) -> list[dict]:
        return [self.rows[int(i)] for i in torch.randint(len(self.rows), (n,), generator=self.g)]


class SeededSampler(RolloutSampler):
    """A sampler whose every rollout of a set of prompts draws with its own seed, ``stream_seed(seed,
    prompt ids, n)``, the RNGs outside left as they were. With ``shared`` the verified batch is kept and
    each later call for the same prompts gets a copy of it (arms that share a policy share the batch)."""

    def __init__(self, policy, tokenizer, task, sampling: SamplingConfig, seed: int, shared: bool):
        super().__init__(HFRolloutEngine(policy, tokenizer), tokenizer, task, sampling, policy=policy)
        self.seed, self.shared = seed, shared
        self.cache: dict[tuple, tuple[RolloutBatch, list[dict]]] = {}

    def rollout(self, rows, n, sampling, details, task=None, behaviour=False):
        key = (tuple(str(r["id"]) for r in rows), n, details)
        if key not in self.cache:
            with seeded(stream_seed(self.seed, *key)):
                out = super().rollout(rows, n, sampling, details, task, behaviour)
            if not self.shared:
                return out
            self.cache[key] = out
        return copy.deepcopy(self.cache[key])


def batch_digest(batch: RolloutBatch) -> str:
    """What an arm trained on: a hash of its samples, rewards and groups (two arms of a pair must agree;
    a record keeps it under the key ``fingerprint``)."""
    h = hashlib.sha256()
    for t in (batch.completion_ids, batch.completion_mask, batch.rewards, batch.group_ids, batch.prompt_ids):
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def row_hashes(batch: RolloutBatch) -> list[int]:
    """One number per sample (its prompt and completion tokens), to count the samples two arms share."""
    ids = batch.completion_ids * batch.completion_mask
    return [stream_seed(p.tolist(), c.tolist()) for p, c in zip(batch.prompt_ids.cpu(), ids.cpu())]
