import dataclasses
import math

import pytest
import torch

from bench.core import RolloutBatch
from bench.errors import CreditBenchError
from bench.options import build_config
from methods.dapo import DAPO, DAPOConfig
from methods.gcpo import GCPO, GCPOConfig, guidance_divergence, negative_prompt, rank_weights

NOTE = "\n\nNote: Intentionally generate an incorrect answer."
ALPHA = math.log(0.2) / math.log(0.6) - 1  # 2.1506601


def make_batch(rewards, lengths, old, negative=None, T=None, prompts=None):
    B = len(rewards)
    T = max(lengths) if T is None else T
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    rewards = torch.tensor(rewards, dtype=torch.float32)
    return RolloutBatch(
        prompt_ids=torch.zeros(B, 1, dtype=torch.long),
        prompt_mask=torch.ones(B, 1, dtype=torch.long),
        completion_ids=torch.zeros(B, T, dtype=torch.long),
        completion_mask=mask,
        group_ids=torch.zeros(B, dtype=torch.long),
        rewards=rewards,
        correct=rewards > 0,
        truncated=torch.zeros(B, dtype=torch.bool),
        max_new_tokens=100,
        old_logprobs=torch.tensor(old, dtype=torch.float32),
        extra={} if negative is None else {"negative_logprobs": torch.tensor(negative, dtype=torch.float32)},
        prompts=[f"p{i}" for i in range(B)] if prompts is None else prompts,
    )


L2 = math.log(2.0)
OLD = [[-2.0, -1.0, -30.0, -1.0], [-0.5, -0.5, 0.0, 0.0]]
NEG = [[-2.0 + L2, -1.0, -5.0, -1.0 - L2], [-0.5, -0.5, -9.0, -9.0]]


def test_divergence_and_hist_weights_hand_worked():
    """Row 0 (4 tokens): delta = log p- - log p = [ln 2, 0, 25 -> clamped 20, -ln 2], so
    D = e^d - d - 1 = [2 - 0.693147 - 1, 0, e^20 - 21 -> clamped 10, 0.5 + 0.693147 - 1]
      = [0.306853, 0, 10, 0.193147].
    Ranks within the row (lowest 1): [3, 1, 4, 2], percentiles r / 4 = [0.75, 0.25, 1, 0.5].
    alpha = ln(0.2) / ln(0.6) - 1 = 2.1506601; p^alpha = [0.538641, 0.050719, 1, 0.225210], sum
    1.814570; times 4 / sum: w = [1.187369, 0.111805, 2.204379, 0.496447] (sums to N = 4).
    Row 1 (2 valid tokens, 2 padding): D = [0, 0], a tie: token order gives ranks [1, 2],
    percentiles [0.5, 1], p^alpha = [0.225210, 1], times 2 / 1.225210: w = [0.367626, 1.632374];
    the padding gets 0 whatever its log-probs.
    Rewards [1, 0] in one group: A = +-0.5 / (sqrt(0.5) + 1e-6) = +-0.7071058; credit = A w."""
    b = make_batch([1.0, 0.0], [4, 2], OLD, NEG)
    d = guidance_divergence(b.old_logprobs, b.extra["negative_logprobs"])
    assert d[0].tolist() == pytest.approx([0.306853, 0.0, 10.0, 0.193147], abs=1e-5)
    assert d[1, :2].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    m = GCPO()
    assert m.config.alpha == pytest.approx(ALPHA) and ALPHA == pytest.approx(2.1506601)
    w = m.weights(b)
    assert w[0].tolist() == pytest.approx([1.187369, 0.111805, 2.204379, 0.496447], abs=1e-5)
    assert w[1].tolist() == pytest.approx([0.367626, 1.632374, 0.0, 0.0], abs=1e-5)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert a == pytest.approx(0.7071058, abs=1e-7)
    c = m.credit(b)
    assert c[0].tolist() == pytest.approx([a * x for x in w[0].tolist()], abs=1e-6)
    assert c[1].tolist() == pytest.approx([-a * 0.367626, -a * 1.632374, 0.0, 0.0], abs=1e-5)


def test_none_normalization_uses_the_divergence_itself():
    """normalization="none": w = D = [0.306853, 0, 10, 0.193147] (the text-to-image code's fallback)."""
    b = make_batch([1.0, 0.0], [4, 2], OLD, NEG)
    w = GCPO(GCPOConfig(normalization="none")).weights(b)
    assert w[0].tolist() == pytest.approx([0.306853, 0.0, 10.0, 0.193147], abs=1e-5)
    assert w[1].tolist() == [0.0] * 4


def official_hist(divergences, response_mask, x=0.4, y=0.8):
    """dp_actor.py::compute_importance_weights's "hist" branch at e0f183d, line for line (the argsort
    made stable, which fixes the order of ties the original leaves unspecified)."""
    alpha = math.log(1.0 - y) / math.log(1.0 - x) - 1.0
    weights = torch.zeros_like(divergences)
    for i in range(divergences.size(0)):
        valid_mask = response_mask[i].bool()
        valid_divs = divergences[i][valid_mask]
        N = valid_divs.size(0)
        if N == 0:
            continue
        order = valid_divs.argsort(stable=True)
        ranks = torch.empty(N, dtype=divergences.dtype)
        ranks[order] = torch.arange(1, N + 1, dtype=divergences.dtype)
        w = (ranks / N).pow(alpha)
        weights[i][valid_mask] = w / w.sum() * N
    return weights


@pytest.mark.parametrize("x, y", [(0.4, 0.8), (0.2, 0.8), (0.3, 0.3)])
def test_rank_weights_match_the_official_loop(x, y):
    """Random lengths (an empty row included), divergences with many ties (rounded to 1 decimal)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        B, T = 6, 11
        lengths = torch.randint(0, T + 1, (B,), generator=g)
        lengths[0] = 0
        mask = (torch.arange(T)[None] < lengths[:, None]).long()
        div = (torch.rand(B, T, generator=g) * 3).round(decimals=1)
        cfg = GCPOConfig(top_fraction=x, target_mass=y)
        got = rank_weights(div, mask, cfg.alpha)
        assert torch.allclose(got, official_hist(div, mask, x, y), atol=1e-6)
        assert torch.allclose(got.sum(-1), lengths.float(), atol=1e-4)  # each row sums to its length


def test_top_fraction_gets_the_target_mass():
    """The transform's design: with distinct divergences the top x = 40% of a long completion's
    tokens get y = 80% of its weight (exactly 1 - (1 - x)^(alpha + 1) = y in the continuum)."""
    div = torch.randperm(1000).float()[None]
    w = rank_weights(div, torch.ones_like(div), GCPOConfig().alpha)
    top = w[div >= 600].sum() / w.sum()
    assert float(top) == pytest.approx(0.8, abs=0.005)


def test_equal_fraction_and_mass_give_the_base_update():
    """top_fraction == target_mass makes alpha = 0: every weight is 1 and the credit is the base
    update's (DAPO with the official reward settings)."""
    b = make_batch([1.0, 0.0], [4, 2], OLD, NEG)
    c = GCPO(GCPOConfig(top_fraction=0.5, target_mass=0.5)).credit(b)
    base = DAPO(DAPOConfig(signed_reward=False, overlong_filter=False, soft_overlong=False, adv_eps=1e-6)).credit(b)
    assert torch.allclose(c, base * b.completion_mask)


def test_negative_prompt_chat_and_compact():
    """The note goes at the end of the user's turn: before "<|im_end|>\\n<|im_start|>assistant" in
    ChatML (the last one, for a multi-turn prompt), before "; \\boxed{}:" in the compact template,
    and at the end of a plain prompt (the official order: format instruction, then the note)."""
    from tasks.math_benchmarks import INSTRUCTION, TEMPLATES

    cfg = GCPOConfig()
    chat = TEMPLATES["qwen-math"].replace("{question}", "1+1?")
    assert negative_prompt(chat, cfg.negative_suffix, cfg.insert_before) == (
        f"<|im_start|>system\n{INSTRUCTION}<|im_end|>\n<|im_start|>user\n1+1?{NOTE}<|im_end|>\n<|im_start|>assistant\n"
    )
    turns = "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n"
    turns += "<|im_start|>assistant\n"
    assert negative_prompt(turns, cfg.negative_suffix, cfg.insert_before) == turns.replace(
        "C<|im_end|>", f"C{NOTE}<|im_end|>"
    )
    llama = "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    assert negative_prompt(llama, cfg.negative_suffix, cfg.insert_before) == llama.replace("Q", "Q" + NOTE)
    assert negative_prompt("12+5-3; \\boxed{}:", cfg.negative_suffix, cfg.insert_before) == (
        "12+5-3" + NOTE + "; \\boxed{}:"
    )
    plain = TEMPLATES["instruct"].replace("{question}", "Q")
    assert negative_prompt(plain, cfg.negative_suffix, cfg.insert_before) == plain + NOTE


def test_compact_negative_prompt_is_encodable_by_the_tiny_tokenizer():
    """The tiny models' character tokenizer covers printable ASCII and newline: the negative prompt
    of a rendered compact arithmetic prompt has no <unk> and is one token per character."""
    from bench.models.policy import char_tokenizer
    from tasks.arithmetic import Arithmetic

    task = Arithmetic()
    prompt = task.prompt({"question": "12+5-3"})
    assert prompt.endswith("; \\boxed{}:")
    neg = negative_prompt(prompt, GCPOConfig().negative_suffix, GCPOConfig().insert_before)
    assert neg == "12+5-3" + NOTE + "; \\boxed{}:"
    tok = char_tokenizer()
    ids = tok(neg, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids and len(ids) == len(neg)


class FakeSampler:
    """Scores every completion under the prompts it is given: log p- = -0.1 * (prompt length) at
    every valid position (0 on padding, as the engine's)."""

    def __init__(self):
        self.prompts = None

    def logprobs(self, batch, prompts):
        self.prompts = list(prompts)
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.float32)
        return -0.1 * lengths[:, None] * batch.completion_mask


def test_augment_stores_negative_logprobs_and_credit_reads_them():
    """Prompts "a; \\boxed{}:" and "bc": negative prompts "a" + NOTE + "; \\boxed{}:" and "bc" + NOTE
    (the fake sampler's log p- = -0.1 * their lengths). The batch comes back with
    extra["negative_logprobs"] and everything else as it was; credit then uses it."""
    b = make_batch([1.0, 0.0], [4, 2], OLD, prompts=["a; \\boxed{}:", "bc"])
    sampler = FakeSampler()
    m = GCPO()
    out = m.augment(b, sampler)
    assert sampler.prompts == ["a" + NOTE + "; \\boxed{}:", "bc" + NOTE]
    neg = out.extra["negative_logprobs"]
    lens = [len(p) for p in sampler.prompts]
    assert neg[0].tolist() == pytest.approx([-0.1 * lens[0]] * 4)
    assert neg[1].tolist() == pytest.approx([-0.1 * lens[1]] * 2 + [0.0, 0.0])
    assert "negative_logprobs" not in b.extra and out.prompts == b.prompts
    assert torch.equal(out.old_logprobs, b.old_logprobs)
    assert torch.allclose(m.credit(out), m.credit(dataclasses.replace(b, extra={"negative_logprobs": neg})))
    assert out.select(torch.tensor([1])).extra["negative_logprobs"].shape == (1, 4)  # minibatches carry it


def test_missing_negative_logprobs_or_prompts_are_clear_errors():
    b = make_batch([1.0, 0.0], [4, 2], OLD)
    with pytest.raises(CreditBenchError, match="negative_logprobs.*augment"):
        GCPO().credit(b)
    with pytest.raises(CreditBenchError, match="prompt text"):
        GCPO().augment(dataclasses.replace(b, prompts=[]), FakeSampler())


def test_entropy_penalty_hand_worked():
    """Equal rewards: credit 0, so the surrogate is 0. With entropy_penalty c = 0.1 the loss is
    c * (-log pi) per token: log pi = [-2, -1, -30, -1] -> [0.2, 0.1, 3.0, 0.1]. Default c = 0: 0.
    The guidance divergence is logged per token (row 0: [0.306853, 0, 10, 0.193147])."""
    b = make_batch([1.0, 1.0], [4, 2], OLD, NEG)
    m = GCPO(GCPOConfig(entropy_penalty=0.1))
    out = m.loss(b, b.old_logprobs, m.credit(b))
    assert out.loss[0].tolist() == pytest.approx([0.2, 0.1, 3.0, 0.1])
    assert out.stats["guidance_divergence"][0].tolist() == pytest.approx([0.306853, 0.0, 10.0, 0.193147], abs=1e-5)
    assert torch.all(GCPO().loss(b, b.old_logprobs, GCPO().credit(b)).loss == 0)


def test_official_defaults_and_validation():
    cfg = GCPOConfig()
    assert (cfg.aggregation, cfg.kl_coef, cfg.clip_low, cfg.clip_high) == ("token-mean", 0.0, 0.2, 0.28)
    assert (cfg.signed_reward, cfg.overlong_filter, cfg.soft_overlong, cfg.dynamic_sampling) == (
        False,
        False,
        False,
        True,
    )
    assert (cfg.adv_eps, cfg.normalization, cfg.top_fraction, cfg.target_mass) == (1e-6, "hist", 0.4, 0.8)
    assert cfg.negative_suffix == NOTE and cfg.entropy_penalty == 0.0
    assert cfg.dual_clip == 3.0  # EasyR1's clip_ratio_dual
    assert build_config(GCPOConfig, {"insert_before": ["<end>"]}, "method").insert_before == ("<end>",)
    for bad in (
        {"normalization": "softmax"},
        {"top_fraction": 0.0},
        {"top_fraction": 0.9},  # above target_mass
        {"target_mass": 1.0},
        {"entropy_penalty": -0.1},
        {"negative_suffix": "  "},
    ):
        with pytest.raises(CreditBenchError, match="|".join(bad) + "|hist, none"):
            GCPOConfig(**bad)
    with pytest.raises(CreditBenchError, match="valid: hist, none"):
        GCPOConfig(normalization="softmax")
