import dataclasses

import pytest
import torch
from test_contract import random_batch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.models.policy import CHARS
from bench.numerics import aggregate
from methods.common import group_advantage
from methods.grpo import GRPO, GRPOConfig
from methods.ibpo import IBPO, IBPOConfig, revision_pairs

A2 = 0.5 / (0.5**0.5 + 1e-4)  # rewards [0, 1]: mean 0.5, std sqrt(0.5), A = +-0.70700
A4 = 0.25 / (0.5 + 1e-4)  # rewards [0, 1, 0, 0]: mean 0.25, std sqrt(0.75 / 3) = 0.5; wrong rows get -A4
DIFF = IBPOConfig(mode="diff_credit")  # the earlier reconstruction


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
    c = IBPO(DIFF).credit(b)
    assert c[0].tolist() == pytest.approx([0, 0, -A2, 0, 0])
    assert c[1].tolist() == pytest.approx([A2] * 5)
    c = IBPO(IBPOConfig(mode="diff_credit", unchanged_credit=0.1)).credit(b)
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
    c = IBPO(DIFF).credit(batch_of([wrong, right], [0.0, 1.0]))
    expected = [-A2 if t in edited else 0.0 for t in range(len(wrong))]
    assert c[0, : len(wrong)].tolist() == pytest.approx(expected)


def test_rows_without_a_correct_sibling_and_sparsify_correct():
    """Group 0 has no correct row and non-binary rewards [0.5, 0]: mean 0.25, std sqrt(0.125), A =
    +-0.25 / (0.35355 + 1e-4) = +-0.70691, on every token.
    Group 1 is y- = [5,6,7,8,9], y+ = [5,6,1,8,9]; with sparsify_correct y+ keeps its advantage
    only on the token the diff to y- changes (position 2)."""
    b = batch_of([[1, 2], [3, 4], [5, 6, 7, 8, 9], [5, 6, 1, 8, 9]], [0.5, 0.0, 0.0, 1.0], groups=[0, 0, 1, 1])
    c = IBPO(IBPOConfig(mode="diff_credit", sparsify_correct=True)).credit(b)
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
    m, sampler = IBPO(IBPOConfig(mode="diff_credit", repair=True)), FakeSampler()
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
    c = IBPO(IBPOConfig(mode="diff_credit", repair=True, repair_advantage="group", repair_credit=0.5)).credit(aug)
    assert c[4].tolist() == pytest.approx([0, 0] + [0.5 * 3 * A4] * 3)


def test_repair_off_or_nothing_to_repair():
    """Repair off: the batch comes back as it is. All correct: no call, the extras are set."""
    b = batch_of([[1, 2], [1, 3]], [1.0, 1.0])
    assert IBPO(DIFF).augment(b, FakeSampler()) is b
    sampler = FakeSampler()
    out = IBPO(IBPOConfig(mode="diff_credit", repair=True)).augment(b, sampler)
    assert sampler.prefixes is None and out.size == 2 and not out.extra["repair"].any()


def test_defaults_and_validation():
    """GRPO's settings; the account's lambda = 0.6 and rho = 0.5; every bad value is refused by name."""
    cfg, grpo = IBPOConfig(), GRPOConfig()
    shared = ("aggregation", "kl_coef", "clip_eps", "scale_rewards", "adv_eps", "std", "eps_mode")
    assert all(getattr(cfg, k) == getattr(grpo, k) for k in shared)
    assert (cfg.mode, cfg.shaping_coef, cfg.rho, cfg.num_references) == ("shaping", 0.6, 0.5, 1)
    assert (cfg.reference_choice, cfg.incorrect_references, cfg.mask_on) == ("nearest", "fallback", "corrected")
    assert (cfg.alignment, cfg.unchanged_credit, cfg.sparsify_correct, cfg.repair) == ("diff", 0.0, False, False)
    for bad, match in [
        ({"mode": "shape"}, "shaping, edit_mask, diff_credit"),
        ({"alignment": "difflib"}, "prefix_suffix"),
        ({"reference_choice": "best"}, "nearest, first, random"),
        ({"incorrect_references": "always"}, "fallback, never"),
        ({"mask_on": "all"}, "corrected, revised"),
        ({"shaping_coef": -0.1}, "shaping_coef must be >= 0"),
        ({"rho": 1.5}, r"rho must be in \[0, 1\]"),
        ({"num_references": 0}, "num_references must be >= 1"),
        ({"unchanged_credit": 2.0}, "unchanged_credit"),
        ({"repair_advantage": "own"}, "source, group"),
        ({"repair_credit": -1.0}, "repair_credit"),
        ({"repair": True}, "set mode: diff_credit"),
        ({"revision_template": "{prompt}{attempt}"}, r"\['attempt', 'prompt'\]"),
        ({"revision_template": "{prompt}{attempt}{reference}{hint}"}, "no other field"),
        ({"revision_template": "{prompt}{attempt}{reference} }"}, "malformed"),
    ]:
        with pytest.raises(CreditBenchError, match=match):
            IBPOConfig(**bad)


def loss_grad(method, b, logprobs):
    logprobs = logprobs.clone().requires_grad_()
    out = method.loss(b, logprobs, method.credit(b))
    aggregate(out.loss, b.completion_mask, method.config.aggregation, max_len=b.max_new_tokens).backward()
    return logprobs.grad


# The contract tests cover the default config; these are the other credit options.
CONFIGS = [
    IBPOConfig(mode="diff_credit", alignment="prefix_suffix"),
    IBPOConfig(mode="diff_credit", sparsify_correct=True),
    IBPOConfig(mode="diff_credit", unchanged_credit=0.1),
]


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


# ------------------------------------------------------------------ shaping and its mask variant
TEMPLATE = "{prompt}|{attempt}|{reference}"


def with_texts(b):
    """The batch with what the engine fills: prompt strings, completion texts (here the token ids
    written out) and task rows."""
    groups = b.group_ids.tolist()
    texts = [" ".join(map(str, b.completion_ids[i, :n].tolist())) for i, n in enumerate(b.lengths.tolist())]
    return dataclasses.replace(
        b, prompts=[f"Q{g}" for g in groups], completions=texts, rows=[{"id": g} for g in groups]
    )


class RevisionSampler:
    """Sampler.generate for prompts rendered with TEMPLATE: the revision of (attempt, reference)
    is answers[(attempt, reference)] = (token ids, correct), by default ([1], wrong). Records the
    prompts and rows it was given."""

    def __init__(self, answers=None):
        self.answers, self.prompts, self.rows = answers or {}, [], []

    def generate(self, prompts, rows):
        self.prompts += prompts
        self.rows += rows
        out = [self.answers.get(tuple(p.split("|")[1:]), ([1], False)) for p in prompts]
        return batch_of([s for s, _ in out], [float(c) for _, c in out])


GROUP4 = [[5, 6, 1, 8, 9], [5, 6, 7, 8, 9], [5, 2, 2, 2, 9], [3, 3, 3, 3, 3]]  # only y0 is correct
SHAPED = [0.675, -0.025, -0.325, -0.325]  # R' - mean R' of the hand-worked example
STD = 0.2225**0.5  # its unbiased std


def test_shaping_hand_worked():
    """Rewards [1, 0, 0, 0]. Each wrong row's reference is its only correct sibling y0, so the
    policy is asked for three revisions, of "5 6 7 8 9", "5 2 2 2 9" and "3 3 3 3 3" against
    "5 6 1 8 9"; the first one is correct. Delta_1 = rho = 0.5, phi = [0, 0.5, 0, 0], and
    R' = R + 0.6 phi = [1, 0.3, 0, 0]: mean 0.325, deviations [0.675, -0.025, -0.325, -0.325],
    unbiased variance (0.455625 + 0.000625 + 2 * 0.105625) / 3 = 0.2225, std 0.47170, so
    A' = deviation / (0.47170 + 1e-4) = [1.4307, -0.0530, -0.6889, -0.6889] on every token
    (GRPO would give y1 -0.4999 like the other wrong rows). One revision in three succeeded."""
    b = with_texts(batch_of(GROUP4, [1.0, 0.0, 0.0, 0.0]))
    sampler = RevisionSampler({("5 6 7 8 9", "5 6 1 8 9"): ([5, 6, 1, 8, 9], True)})
    m = IBPO(IBPOConfig(revision_template=TEMPLATE))
    aug = m.augment(b, sampler)
    assert sampler.prompts == ["Q0|5 6 7 8 9|5 6 1 8 9", "Q0|5 2 2 2 9|5 6 1 8 9", "Q0|3 3 3 3 3|5 6 1 8 9"]
    assert sampler.rows == [{"id": 0}] * 3
    assert aug.size == 4 and aug.extra["revisions"].tolist() == [0, 1, 1, 1]
    assert aug.extra["revisions_correct"].tolist() == [0, 1, 0, 0]
    c = m.credit(aug)
    for i, dev in enumerate(SHAPED):
        assert c[i].tolist() == pytest.approx([dev / (STD + 1e-4)] * 5, abs=1e-6)
    out = m.loss(aug, aug.old_logprobs, c)
    assert out.scalars["revision_success"].item() == pytest.approx(1 / 3)


def test_edit_mask_hand_worked():
    """The batch and A' of test_shaping_hand_worked. y1's revision [5,6,1,8,9,4] is correct; the
    Levenshtein alignment substitutes 7 -> 1 and inserts 4, so U = {0, 1, 3, 4} and y1 keeps A'
    on token 2 only. y3's revision [3,3,4,3,3] is wrong (U = {0, 1, 3, 4} too): with
    mask_on="corrected" y3 keeps A' everywhere, with "revised" only on token 2. y2's revision [1]
    keeps nothing, so y2 keeps A' everywhere; y0 (correct) is never masked."""
    b = with_texts(batch_of(GROUP4, [1.0, 0.0, 0.0, 0.0]))
    answers = {
        ("5 6 7 8 9", "5 6 1 8 9"): ([5, 6, 1, 8, 9, 4], True),
        ("3 3 3 3 3", "5 6 1 8 9"): ([3, 3, 4, 3, 3], False),
    }
    a = [dev / (STD + 1e-4) for dev in SHAPED]
    for mask_on, y3 in [("corrected", [1, 1, 1, 1, 1]), ("revised", [0, 0, 1, 0, 0])]:
        m = IBPO(IBPOConfig(mode="edit_mask", mask_on=mask_on, revision_template=TEMPLATE))
        c = m.credit(m.augment(b, RevisionSampler(answers)))
        assert c[0].tolist() == pytest.approx([a[0]] * 5)
        assert c[1].tolist() == pytest.approx([0, 0, a[1], 0, 0])
        assert c[2].tolist() == pytest.approx([a[2]] * 5)
        assert c[3].tolist() == pytest.approx([a[3] * k for k in y3])


def test_revision_pairs_order_and_fallback():
    """Group 0: wrong y0 = [1,2,3,4,5,6] and y3 = [1,2,3,4,5,6,7]; correct y1 = [1,2,3,0,0,0]
    (LCS 3 with both) and y2 = [1,2,3,4,5,0] (LCS 5). Group 1 is all wrong: [7,7], [7,8], [9].
    nearest, n=1: y0, y3 -> y2 (the higher similarity); group 1 falls back to incorrect siblings:
    [7,7] and [7,8] (similarity 2*1/4 = 0.5) pick each other, [9] (0 with both) the lower index 4.
    first: y0, y3 -> y1. never: group 1 gets no pairs. n=3: correct siblings first, then the
    incorrect ones."""
    seqs = [[1, 2, 3, 4, 5, 6], [1, 2, 3, 0, 0, 0], [1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 6, 7], [7, 7], [7, 8], [9]]
    b = batch_of(seqs, [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0], groups=[0, 0, 0, 0, 1, 1, 1])

    def pairs(**options):
        src, ref = revision_pairs(b, IBPOConfig(**options))
        return list(zip(src.tolist(), ref.tolist()))

    assert pairs() == [(0, 2), (3, 2), (4, 5), (5, 4), (6, 4)]
    assert pairs(reference_choice="first") == [(0, 1), (3, 1), (4, 5), (5, 4), (6, 4)]
    assert pairs(incorrect_references="never") == [(0, 2), (3, 2)]
    assert pairs(num_references=3) == [(0, 2), (0, 1), (0, 3), (3, 2), (3, 1), (3, 0)] + [
        (4, 5),
        (4, 6),
        (5, 4),
        (5, 6),
        (6, 4),
        (6, 5),
    ]
    torch.manual_seed(0)
    drawn = pairs(reference_choice="random", num_references=3)
    for s, refs in [(0, [1, 2, 3]), (3, [0, 1, 2]), (4, [5, 6])]:
        mine = [r for t, r in drawn if t == s]
        assert sorted(mine) == refs and all(b.correct[mine[k]] >= b.correct[mine[k + 1]] for k in range(len(mine) - 1))


def test_phi_averages_the_revisions_of_several_references():
    """Rewards [1, 1, 0], num_references=2: y2 is revised against y0 (correct revision) and y1
    (wrong), so phi_2 = rho * 1/2 = 0.25 and R' = [1, 1, 0.6 * 0.25] = [1, 1, 0.15]: mean 0.71667,
    deviations [0.28333, 0.28333, -0.56667], unbiased variance 0.48167 / 2 = 0.24083, std 0.49075."""
    b = with_texts(batch_of([[4, 4], [4, 5], [6, 6]], [1.0, 1.0, 0.0]))
    answers = {("6 6", "4 4"): ([4, 4], True), ("6 6", "4 5"): ([6, 5], False)}
    m = IBPO(IBPOConfig(num_references=2, revision_template=TEMPLATE))
    aug = m.augment(b, RevisionSampler(answers))
    assert aug.extra["revisions"].tolist() == [0, 0, 2] and aug.extra["revisions_correct"].tolist() == [0, 0, 1]
    std = (2 * (0.85 / 3) ** 2 + (1.7 / 3) ** 2) ** 0.5 / 2**0.5
    assert m.credit(aug)[:, 0].tolist() == pytest.approx([x / (std + 1e-4) for x in [0.85 / 3, 0.85 / 3, -1.7 / 3]])


def test_edit_mask_takes_each_rows_first_usable_revision():
    """Rewards [1, 1, 0], num_references=2: y2 = [6,6,6] shares no token with y0 or y1, so the tie
    puts y0 first. Its revision against y0, [6,6,6,1], is wrong and keeps all three tokens (one
    insertion); against y1, [6,7,6], correct and keeps tokens 0 and 2. "corrected" takes U from the
    second, m = [0, 1, 0]; "revised" from the first, m = [0, 0, 0]. A'_2 is that of
    test_phi_averages_the_revisions_of_several_references: -0.56667 / (0.49075 + 1e-4)."""
    b = with_texts(batch_of([[4, 4], [4, 5], [6, 6, 6]], [1.0, 1.0, 0.0]))
    answers = {("6 6 6", "4 4"): ([6, 6, 6, 1], False), ("6 6 6", "4 5"): ([6, 7, 6], True)}
    std = (2 * (0.85 / 3) ** 2 + (1.7 / 3) ** 2) ** 0.5 / 2**0.5
    a = -1.7 / 3 / (std + 1e-4)
    for mask_on, m in [("corrected", [0, 1, 0]), ("revised", [0, 0, 0])]:
        cfg = IBPOConfig(mode="edit_mask", mask_on=mask_on, num_references=2, revision_template=TEMPLATE)
        method = IBPO(cfg)
        assert method.credit(method.augment(b, RevisionSampler(answers)))[2].tolist() == pytest.approx(
            [a * k for k in m]
        )


def test_all_wrong_group_learns_from_a_successful_revision_only_with_fallback():
    """Rewards [0, 0]: with the fallback each row is revised against the other; y0's revision is
    correct, so R' = [0.3, 0], A' = +-0.15 / (0.21213 + 1e-4). With incorrect_references="never"
    nothing is revised and the group's credit is 0, as in GRPO."""
    b = with_texts(batch_of([[1, 2], [3, 4]], [0.0, 0.0]))
    sampler = RevisionSampler({("1 2", "3 4"): ([7], True)})
    m = IBPO(IBPOConfig(revision_template=TEMPLATE))
    a = 0.15 / (0.045**0.5 + 1e-4)
    assert m.credit(m.augment(b, sampler)).flatten().tolist() == pytest.approx([a, a, -a, -a])
    m = IBPO(IBPOConfig(incorrect_references="never", revision_template=TEMPLATE))
    sampler = RevisionSampler()
    assert (m.credit(m.augment(b, sampler)) == 0).all() and sampler.prompts == []


def test_without_revisions_shaping_is_grpo():
    """A batch augment never saw (the contract tests), or one with nothing to revise: GRPO's credit."""
    b = random_batch(seed=5)
    assert torch.equal(IBPO().credit(b), GRPO().credit(b))
    b = with_texts(batch_of([[1, 2], [1, 3]], [1.0, 1.0]))
    sampler = RevisionSampler()
    aug = IBPO().augment(b, sampler)
    assert sampler.prompts == [] and aug.extra["revisions"].tolist() == [0, 0]
    assert "revision_success" not in IBPO().loss(aug, aug.old_logprobs, IBPO().credit(aug)).scalars


def test_default_template_renders_prompt_attempt_and_reference():
    """x~ = prompt + attempt + the reference, in characters the tiny models' tokenizer has."""
    b = with_texts(batch_of([[1, 2], [3, 4]], [1.0, 0.0]))
    sampler = RevisionSampler()
    IBPO().augment(b, sampler)
    assert sampler.prompts == ["Q0" + "3 4" + "\n\nAnother attempt:\n" + "1 2" + "\n\nRevised attempt:\n"]
    assert all(c in CHARS for c in sampler.prompts[0])


class Coin:
    """Sampler.generate whose revisions [3, 4] are correct at random (seeded)."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def generate(self, prompts, rows):
        n = len(prompts)
        return batch_of([[3, 4]] * n, torch.randint(0, 2, (n,), generator=self.g).float().tolist())


@pytest.mark.parametrize("mode", ["shaping", "edit_mask"])
def test_shaped_credit_keeps_gradient_sign_and_clip(mode):
    """On random groups with random revision verdicts: at ratio 1 the push on each token has the sign
    of its credit (0 where the mask removes it), and log-ratio +-3 in the credit's direction is
    clipped everywhere."""
    for seed in range(3):
        b = with_texts(random_batch(seed=seed, T=8))
        m = IBPO(IBPOConfig(mode=mode, mask_on="revised"))
        aug = m.augment(b, Coin(seed))
        credit, push = m.credit(aug), -loss_grad(m, aug, aug.old_logprobs)
        valid = aug.completion_mask.bool()
        assert (push[valid & (credit > 0)] > 0).all() and (push[valid & (credit < 0)] < 0).all()
        assert (push[credit == 0] == 0).all()
        assert (loss_grad(m, aug, aug.old_logprobs + 3.0 * credit.sign()) == 0).all()
