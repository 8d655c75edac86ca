import dataclasses
import random

import pytest
import torch
from test_contract import random_batch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.numerics import aggregate
from methods.align import align_to_nearest, lcs_nearest
from methods.common import group_advantage
from methods.grpo import GRPOConfig
from methods.ibpo import IBPO, IBPOConfig

A2 = 0.5 / (0.5**0.5 + 1e-4)  # rewards [0, 1]: mean 0.5, std sqrt(0.5), A = +-0.70700
A4 = 0.25 / (0.5 + 1e-4)  # rewards [0, 1, 0, 0]: mean 0.25, std sqrt(0.75 / 3) = 0.5; wrong rows get -A4


def batch_of(seqs, rewards, groups=None):
    """Right-padded completions (pad id 0) with one group unless told otherwise."""
    B, T = len(seqs), max(len(s) for s in seqs)
    ids = torch.tensor([s + [0] * (T - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (T - len(s)) for s in seqs])
    rewards = torch.tensor(rewards, dtype=torch.float32)
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=ids,
        completion_mask=mask,
        group_ids=torch.tensor(groups if groups is not None else [0] * B),
        rewards=rewards,
        correct=rewards >= 1,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=16,
        old_logprobs=torch.zeros(B, T),
    )


def test_diff_credit_hand_worked():
    """y- = [5,6,7,8,9] (wrong) vs y+ = [5,6,1,8,9] (correct): the diff replaces position 2 only.
    A = -+0.70700, so y- gets [0, 0, -0.707, 0, 0] and y+ keeps +0.707 on every token.
    With unchanged_credit 0.1 the matched tokens of y- get 0.1 * -0.707."""
    b = batch_of([[5, 6, 7, 8, 9], [5, 6, 1, 8, 9]], [0.0, 1.0])
    c = IBPO().credit(b)
    assert c[0].tolist() == pytest.approx([0, 0, -A2, 0, 0])
    assert c[1].tolist() == pytest.approx([A2] * 5)
    c = IBPO(IBPOConfig(unchanged_credit=0.1)).credit(b)
    assert c[0].tolist() == pytest.approx([-0.1 * A2, -0.1 * A2, -A2, -0.1 * A2, -0.1 * A2])


@pytest.mark.parametrize(
    "wrong, right, edited",
    [
        ([5, 6, 7, 7, 8, 9], [5, 6, 8, 9], [2, 3]),  # y- has two extra tokens: deleted
        ([5, 6, 8, 9], [5, 6, 7, 8, 9], []),  # y+ inserts a token: nothing of y- is changed
        ([1, 2, 3, 4, 5], [1, 9, 9, 9, 9, 9, 5], [1, 2, 3]),  # a span replaced by a longer one
        ([3, 3, 3], [4, 4], [0, 1, 2]),  # nothing in common
        ([1, 2, 3, 1, 2, 3], [2, 3, 1, 2], [0, 5]),  # y+ is the middle of y-
    ],
)
def test_diff_insertions_and_deletions(wrong, right, edited):
    """Only replaced or deleted tokens of y- are edited; what y+ inserts has no token in y-."""
    c = IBPO().credit(batch_of([wrong, right], [0.0, 1.0]))
    expected = [-A2 if t in edited else 0.0 for t in range(len(wrong))]
    assert c[0, : len(wrong)].tolist() == pytest.approx(expected)


def test_nearest_sibling_and_ties():
    """y- = [1,2,3,4,5,6] (row 0). Correct rows 1..3 have LCS 3, 5, 5 with it, so similarity
    2*LCS/12 = 0.5, 0.83, 0.83: rows 2 and 3 tie and the lower index (2) wins. Under
    prefix_suffix the common prefix+suffix is 3, 5 and 5 as well. Row 4 is in another group."""
    seqs = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 0, 0, 0], [1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 7], [1, 2, 3, 4, 5, 6, 8]]
    b = batch_of(seqs, [0.0, 1.0, 1.0, 1.0, 1.0], groups=[0, 0, 0, 0, 1])
    for alignment in ("diff", "prefix_suffix"):
        nearest, edited = align_to_nearest(b.completion_ids, b.lengths, b.group_ids, ~b.correct, b.correct, alignment)
        assert nearest.tolist() == [2, -1, -1, -1, -1]
        assert edited[0].tolist() == [False] * 5 + [True, False]  # the 7th column is padding
        assert edited[1:].all()
    assert lcs_nearest([1, 2, 3], [[9], [1, 9, 3], [1, 2, 3, 4]]) == (2, [True, True, True])


def lcs_table(a, b):
    L = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            L[i][j] = L[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(L[i - 1][j], L[i][j - 1])
    return L


def test_bit_parallel_lcs_matches_the_dp_table():
    """Against the textbook O(|a||b|) table: the nearest reference maximises 2 LCS / (|a| + |b|)
    (first on ties), the matched tokens number LCS(a, ref) and are a subsequence of ref."""
    rng = random.Random(0)
    for _ in range(400):
        vocab = rng.randint(1, 5)
        a = [rng.randrange(vocab) for _ in range(rng.randint(0, 14))]
        refs = [[rng.randrange(vocab) for _ in range(rng.randint(0, 14))] for _ in range(rng.randint(1, 4))]
        k, matched = lcs_nearest(a, refs)
        lcs = [lcs_table(a, r)[len(a)][len(r)] for r in refs]
        sims = [2 * n / max(len(a) + len(r), 1) for n, r in zip(lcs, refs)]
        assert k == sims.index(max(sims))
        assert sum(matched) == lcs[k]
        rest = iter(refs[k])
        assert all(tok in rest for tok, m in zip(a, matched) if m)


def test_prefix_suffix_loop_vs_vectorised():
    """Straight from the definition: per wrong row, over the correct rows of its group, p = common
    prefix, s = common suffix of what is left, similarity 2 (p + s) / (|y-| + |y+|); the edited
    span of the nearest is [p, |y-| - s)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        B, T, G = 12, int(torch.randint(1, 9, (), generator=g)), 4
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        ids = torch.randint(0, 3, (B, T), generator=g)
        groups = torch.arange(B // G).repeat_interleave(G)
        correct = torch.randint(0, 2, (B,), generator=g).bool()
        nearest, edited = align_to_nearest(ids, lengths, groups, ~correct, correct, "prefix_suffix")
        for i in range(B):
            a = ids[i, : lengths[i]].tolist()
            best, best_sim, span = -1, -1.0, None
            for j in range(B):
                if correct[i] or not correct[j] or groups[j] != groups[i]:
                    continue
                r = ids[j, : lengths[j]].tolist()
                p = 0
                while p < min(len(a), len(r)) and a[p] == r[p]:
                    p += 1
                s = 0
                while s < min(len(a), len(r)) - p and a[-1 - s] == r[-1 - s]:
                    s += 1
                sim = 2 * (p + s) / (len(a) + len(r))
                if span is None or sim > best_sim:
                    best, best_sim, span = j, sim, (p, len(a) - s)
            assert nearest[i] == best
            want = [True] * T if span is None else [span[0] <= t < span[1] for t in range(T)]
            assert edited[i].tolist() == want


def test_rows_without_a_correct_sibling_and_sparsify_correct():
    """Group 0 has no correct row and non-binary rewards [0.5, 0]: mean 0.25, std sqrt(0.125), A =
    +-0.25 / (0.35355 + 1e-4) = +-0.70691, on every token.
    Group 1 is y- = [5,6,7,8,9], y+ = [5,6,1,8,9]; with sparsify_correct y+ keeps its advantage
    only on the token the diff to y- changes (position 2)."""
    b = batch_of([[1, 2], [3, 4], [5, 6, 7, 8, 9], [5, 6, 1, 8, 9]], [0.5, 0.0, 0.0, 1.0], groups=[0, 0, 1, 1])
    c = IBPO(IBPOConfig(sparsify_correct=True)).credit(b)
    a = 0.25 / (0.125**0.5 + 1e-4)
    assert c[0, :2].tolist() == pytest.approx([a, a])
    assert c[1, :2].tolist() == pytest.approx([-a, -a])
    assert c[2].tolist() == pytest.approx([0, 0, -A2, 0, 0])
    assert c[3].tolist() == pytest.approx([0, 0, A2, 0, 0])


class FakeSampler:
    """Continues every prefix with [8, 9] (up to max_new_tokens); correct iff token 6 is in it."""

    def __init__(self):
        self.prefixes = None

    def complete(self, batch, index, prefixes):
        self.prefixes = [p.tolist() for p in prefixes]
        seqs = [(p + [8, 9])[: batch.max_new_tokens] for p in self.prefixes]
        out = batch_of(seqs, [1.0 if 6 in s else 0.0 for s in seqs], groups=batch.group_ids[index].tolist())
        return dataclasses.replace(out, old_logprobs=None)


def test_repair_augment_and_credit_hand_worked():
    """One group, rewards [0, 1, 0, 0], A = [-0.4999, 1.4997, -0.4999, -0.4999] (A4 = 0.4999).
    Every wrong row has the correct y1 = [5,6,1,8,9] as nearest; first divergences d = 2, 1, 0,
    so the prefixes are y-[:d] + [y1_d]: [5,6,1], [5,6], [5]. The sampler appends [8, 9]:
    repairs [5,6,1,8,9] (correct), [5,6,8,9] (correct), [5,8,9] (wrong).
    Credit (source mode): a correct repair gets |A_src| = 0.4999 from d on, zeros before; the wrong
    repair gets 0. Group mode: the repair's own reward 1 under the originals' statistics: 1.4997.
    The original rows' credit is the same as without the repairs."""
    b = batch_of([[5, 6, 7, 8, 9], [5, 6, 1, 8, 9], [5, 2, 2, 2, 9], [3, 3, 3, 3, 3]], [0.0, 1.0, 0.0, 0.0])
    b = dataclasses.replace(b, old_logprobs=None)
    m, sampler = IBPO(IBPOConfig(repair=True)), FakeSampler()
    aug = m.augment(b, sampler)
    assert sampler.prefixes == [[5, 6, 1], [5, 6], [5]]
    assert aug.size == 7 and aug.group_ids.tolist() == [0] * 7
    assert aug.extra["repair"].tolist() == [False] * 4 + [True] * 3
    assert aug.extra["edit_start"].tolist() == [0, 0, 0, 0, 2, 1, 0]
    assert aug.correct.tolist() == [False, True, False, False, True, True, False]
    c = m.credit(aug)
    assert c[4].tolist() == pytest.approx([0, 0, A4, A4, A4])
    assert c[5, :4].tolist() == pytest.approx([0, A4, A4, A4])
    assert c[6].tolist() == [0.0] * 5
    assert torch.allclose(c[:4], m.credit(b))
    assert c[0].tolist() == pytest.approx([0, 0, -A4, 0, 0])
    c = IBPO(IBPOConfig(repair=True, repair_advantage="group", repair_credit=0.5)).credit(aug)
    assert c[4].tolist() == pytest.approx([0, 0] + [0.5 * 3 * A4] * 3)


def test_repair_off_or_nothing_to_repair():
    """Repair off: the batch comes back as it is. All correct: no call, the extras are set."""
    b = batch_of([[1, 2], [1, 3]], [1.0, 1.0])
    assert IBPO().augment(b, FakeSampler()) is b
    sampler = FakeSampler()
    out = IBPO(IBPOConfig(repair=True)).augment(b, sampler)
    assert sampler.prefixes is None and out.size == 2 and not out.extra["repair"].any()


def test_defaults_are_grpo_and_validation():
    cfg, grpo = IBPOConfig(), GRPOConfig()
    assert (cfg.aggregation, cfg.kl_coef, cfg.clip_eps, cfg.scale_rewards) == (
        grpo.aggregation,
        grpo.kl_coef,
        grpo.clip_eps,
        grpo.scale_rewards,
    )
    assert (cfg.alignment, cfg.unchanged_credit, cfg.sparsify_correct, cfg.repair) == ("diff", 0.0, False, False)
    for bad, match in [
        ({"alignment": "difflib"}, "prefix_suffix"),
        ({"unchanged_credit": 2.0}, "unchanged_credit"),
        ({"repair_advantage": "own"}, "source, group"),
        ({"repair_credit": -1.0}, "repair_credit"),
    ]:
        with pytest.raises(CreditBenchError, match=match):
            IBPOConfig(**bad)


def loss_grad(method, b, logprobs):
    logprobs = logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    aggregate(out.loss, b.completion_mask, method.config.aggregation, max_len=b.max_new_tokens).backward()
    return logprobs.grad


# The contract tests cover the default config; these are the other credit options.
CONFIGS = [IBPOConfig(alignment="prefix_suffix"), IBPOConfig(sparsify_correct=True), IBPOConfig(unchanged_credit=0.1)]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_other_options_keep_the_gradient_sign(cfg):
    """At ratio 1, -dL/dlogprob is >= 0 on sequences with A > 0 and <= 0 where A < 0."""
    for seed in range(4):
        b = random_batch(seed=seed, T=8)
        push, adv = -loss_grad(IBPO(cfg), b, b.old_logprobs), group_advantage(b.rewards, b.group_ids)[:, None]
        valid = b.completion_mask.bool()
        assert (push[valid & (adv > 0)] >= 0).all() and (push[valid & (adv < 0)] <= 0).all()
        assert push.abs().sum() > 0


@pytest.mark.parametrize("cfg", CONFIGS)
def test_other_options_keep_the_clip_boundaries(cfg):
    """log-ratio +3 on positive- and -3 on negative-advantage sequences is outside the clip
    range in the advantage's direction: no gradient anywhere."""
    for seed in range(4):
        b = random_batch(seed=seed, T=8)
        adv = group_advantage(b.rewards, b.group_ids)[:, None]
        assert (loss_grad(IBPO(cfg), b, b.old_logprobs + 3.0 * adv.sign()) == 0).all()
