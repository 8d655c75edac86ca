"""VinePPO (methods/vineppo.py): its steps, its Monte-Carlo values and step advantages on a small tree of
completions whose continuations' rewards are fixed (hand-worked), the official fill of values past
``max_value_steps``, its whitening, its twin, and its rollouts counted apart from the training samples
by the real sampler."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.config import SamplingConfig
from bench.core import RolloutBatch
from bench.engine.rollout import HFRolloutEngine
from bench.engine.sampling import RolloutSampler
from bench.models.policy import build_tiny
from methods.vineppo import (
    ADVANTAGE,
    STEP,
    VALUE_SE,
    VALUES,
    VinePPO,
    VinePPOConfig,
    split_steps,
    step_advantages,
    whiten,
)
from tests.engine.test_behaviour import _Task as EvenLengthTask  # even length: correct

CHARS = "0123456789,+"
ID = {c: i + 3 for i, c in enumerate(CHARS)}  # 0: pad


def batch_of(texts: list[str], rewards: list[float], groups: list[int] | None = None) -> RolloutBatch:
    """Character-level completions of one prompt (token id per character), right-padded."""
    B, T = len(texts), max(len(t) for t in texts)
    ids = torch.tensor([[ID[c] for c in t] + [0] * (T - len(t)) for t in texts])
    mask = torch.tensor([[1] * len(t) + [0] * (T - len(t)) for t in texts])
    r = torch.tensor(rewards)
    return RolloutBatch(
        prompt_ids=torch.full((B, 2), 7), prompt_mask=torch.ones(B, 2, dtype=torch.long), completion_ids=ids,
        completion_mask=mask, group_ids=torch.tensor(groups or [0] * B), rewards=r, correct=r > 0,
        truncated=torch.zeros(B, dtype=torch.bool), max_new_tokens=8, old_logprobs=torch.zeros(B, T),
        completions=list(texts),
    )  # fmt: skip


class TreeSampler:
    """Continuations with fixed rewards: the K rewards of each prefix (its text) from a table."""

    def __init__(self, table: dict[str, list[float]]):
        self.table, self.calls = table, []

    def token_starts(self, batch):
        return [list(range(len(t))) for t in batch.completions]

    def complete(self, batch, index, prefixes, extra=False):
        texts = ["".join(CHARS[int(i) - 3] for i in p) for p in prefixes]
        self.calls.append((texts, extra))
        seen: dict[str, int] = {}
        rewards = []
        for t in texts:
            rewards.append(self.table[t][seen.get(t, 0)])
            seen[t] = seen.get(t, 0) + 1
        return dataclasses.replace(batch.select(index), rewards=torch.tensor(rewards))


# The tree: from the prompt V = 1/2; after "1" V = 1; after "1,2" V = 0 (K = 2 continuations each).
TREE = {"": [1.0, 0.0], "1": [1.0, 1.0], "1,2": [0.0, 0.0]}


def test_steps_start_at_the_delimiter_and_whitespace_joins_its_neighbour():
    assert split_steps("4,3,0,\\boxed{0}", ",") == [0, 1, 3, 5, 15]  # "4" ",3" ",0" ",\boxed{0}"
    assert split_steps("\n\nab\ncd\n", "\n") == [0, 4, 8]  # the official merge of leading empty steps
    assert split_steps("abc", "\n") == [0, 3] and split_steps("", ",") == [0, 0]


def test_values_and_step_advantages_on_a_tree_hand_worked():
    """Row 0 "1,2,3" (R = 1), steps "1" ",2" ",3": A = V1 - V0 = 1/2, V2 - V1 = -1, R - V2 = 1.
    Row 1 "1,5" (R = 0), steps "1" ",5": A = 1/2, 0 - V1 = -1. The prompt and "1" are shared: three
    distinct states, each sampled K = 2 times, as extra samples; the prompt's SE is sd([1, 0]) / sqrt(2)."""
    b = batch_of(["1,2,3", "1,5"], [1.0, 0.0])
    sampler = TreeSampler(TREE)
    m = VinePPO(VinePPOConfig(mc_rollouts=2, step_delimiter=",", whiten="none"))
    out = m.augment(b, sampler)
    assert sampler.calls == [(["", "", "1", "1", "1,2", "1,2"], True)]
    assert out.extra[ADVANTAGE][0].tolist() == [0.5, -1.0, -1.0, 1.0, 1.0]
    assert out.extra[ADVANTAGE][1, :3].tolist() == [0.5, -1.0, -1.0]
    assert out.extra[STEP].tolist() == [[0, 1, 1, 2, 2], [0, 1, 1, -1, -1]]
    assert out.extra[VALUES][0, :3].tolist() == [0.5, 1.0, 0.0] and out.extra[VALUES][1, :2].tolist() == [0.5, 1.0]
    assert out.extra[VALUE_SE][0, :3].tolist() == pytest.approx([0.5, 0.0, 0.0])  # sd of [1, 0] / sqrt(2)
    scalars = m.loss(out, out.old_logprobs, m.credit(out)).scalars  # over the 5 estimated states
    assert float(scalars["vine_value"]) == pytest.approx(3 / 5) and float(scalars["vine_value_se"]) == pytest.approx(
        1 / 5
    )
    assert ADVANTAGE not in b.extra  # the drawn batch is left as it was (the probe's arms share it)
    assert torch.equal(m.credit(out), out.extra[ADVANTAGE] * out.completion_mask)


def test_values_past_max_value_steps_are_the_return():
    """With one value step, row 0's V2 is not estimated: V2 = r2 + V3 = R = 1, so A = [1/2, 0, 0]: the
    official fill from the end (the step after the last estimated state carries R - V1)."""
    assert step_advantages([0.5, 1.0, None], 1.0) == [0.5, 0.0, 0.0]
    assert step_advantages([0.5, None, None], 0.0) == [-0.5, 0.0, 0.0]
    assert step_advantages([], 1.0) == []
    b = batch_of(["1,2,3"], [1.0])
    sampler = TreeSampler(TREE)
    out = VinePPO(VinePPOConfig(mc_rollouts=2, step_delimiter=",", whiten="none", max_value_steps=1)).augment(
        b, sampler
    )
    assert sampler.calls[0][0] == ["", "", "1", "1"]
    assert out.extra[ADVANTAGE][0].tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]


def test_whitening_and_the_twin_hand_worked():
    """The twin (one step): A = R - V0 = +1/2 on row 0's 5 tokens, -1/2 on row 1's 3. Whitened over the 8
    tokens: mean (2.5 - 1.5) / 8 = 1/8, unbiased var = (5 (3/8)^2 + 3 (5/8)^2) / 7 = 1.875 / 7."""
    b = batch_of(["1,2,3", "1,5"], [1.0, 0.0])
    twin = VinePPO(VinePPOConfig(mc_rollouts=2, step_delimiter=",", **VinePPO.twin_options))
    sampler = TreeSampler(TREE)
    out = twin.augment(b, sampler)
    assert sampler.calls[0][0] == ["", ""]  # only the prompt's value
    sd = (1.875 / 7 + 1e-8) ** 0.5
    c = twin.credit(out)
    assert c[0].tolist() == pytest.approx([0.375 / sd] * 5) and c[1, :3].tolist() == pytest.approx([-0.625 / sd] * 3)
    assert c[1, 3:].tolist() == [0.0, 0.0]
    grayen = whiten(out.extra[ADVANTAGE], out.completion_mask.float(), "grayen")
    assert grayen[0, 0].item() == pytest.approx(0.5 / sd)


def test_a_batch_without_values_takes_the_groups_mean_as_its_baseline():
    b = batch_of(["1,2,3", "1,5", "12"], [1.0, 0.0, 1.0], groups=[0, 0, 1])
    raw = VinePPO(VinePPOConfig(whiten="none")).credit(b)
    assert raw[0].tolist() == [0.5] * 5 and raw[1, :3].tolist() == [-0.5] * 3 and raw[2, :2].tolist() == [0.0, 0.0]


def test_the_real_sampler_counts_the_rollouts_as_extra_and_maps_characters_to_tokens():
    """With the tiny policy and its character-level tokenizer: each token starts one character on, the
    continuations are extra samples (the sample budget unchanged) whose tokens count, and each value is a
    mean of K rewards."""

    model, tok = build_tiny("tiny-500k", seed=0)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12)
    sampler = RolloutSampler(HFRolloutEngine(model.eval(), tok), tok, EvenLengthTask(), sampling, policy=model)
    torch.manual_seed(0)
    batch, _ = sampler.rollout([{"prompt": "1+2+3="}, {"prompt": "4+5="}], 2, sampling, details=False)
    starts = sampler.token_starts(batch)
    assert [len(s) for s in starts] == batch.lengths.tolist()
    for s, text in zip(starts, batch.completions):  # one character a token (none for a special token)
        assert s[0] == 0 and all(b - a in (0, 1) for a, b in zip(s, s[1:])) and s[-1] <= len(text)
    before = (sampler.samples, sampler.extra, sampler.tokens)
    K = 3
    out = VinePPO(VinePPOConfig(mc_rollouts=K, step_delimiter="1")).augment(batch, sampler)
    assert sampler.samples == before[0] and sampler.tokens > before[2]
    assert (sampler.extra - before[1]) % K == 0 and sampler.extra > before[1]
    v = out.extra[VALUES]
    assert bool(((v[~v.isnan()] * K).round() == v[~v.isnan()] * K).all())  # means of K rewards in {0, 1}
