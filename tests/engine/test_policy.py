import pytest
import torch

from bench.config import SamplingConfig
from bench.engine.rollout import HFRolloutEngine, completion_mask
from bench.engine.scoring import score
from bench.errors import CreditBenchError
from bench.models.policy import TINY_SIZES, build_tiny, char_tokenizer, load_policy, num_parameters


def test_tokenizer_round_trips_without_download():
    tok = char_tokenizer()
    text = "63-11=52,52+48=100,\\boxed{100}\nHello, World! ~`|"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.padding_side == "left"


def test_tiny_sizes_span_half_a_million_to_ten_million():
    counts = {s: num_parameters(build_tiny(s)[0]) for s in TINY_SIZES}
    assert len(counts) >= 3
    assert 0.4e6 < min(counts.values()) and max(counts.values()) < 10e6
    assert list(counts.values()) == sorted(counts.values())


def test_save_and_load_through_from_pretrained(tmp_path):
    model, tok = build_tiny("tiny-500k", seed=3)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, tok2 = load_policy(tmp_path)
    ids = torch.tensor([tok("12+34", add_special_tokens=False)["input_ids"]])
    assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert tok2.decode(ids[0]) == "12+34"


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(CreditBenchError, match="cannot load model"):
        load_policy(tmp_path / "nope")


def test_completion_mask_includes_first_eos_only():
    eos = 1
    ids = torch.tensor([[5, 6, 1, 0, 0], [5, 1, 1, 7, 0], [5, 6, 7, 8, 9]])
    mask, truncated = completion_mask(ids, eos)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert truncated.tolist() == [False, False, True]


def test_score_matches_a_plain_forward_and_ignores_padding():
    torch.manual_seed(0)
    model, tok = build_tiny("tiny-500k")
    engine = HFRolloutEngine(model, tok)
    gen = engine.generate(["12+3; \\boxed{}:", "1+2; \\boxed{}:"], 2, SamplingConfig(max_new_tokens=8))
    s = score(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask)
    # row 2 ("1+2...") is left-padded by one token: score it alone, unpadded, by hand
    row = 2
    p = gen.prompt_ids[row][gen.prompt_mask[row] == 1]
    c = gen.completion_ids[row][gen.completion_mask[row] == 1]
    logits = model(torch.cat([p, c])[None]).logits[0, len(p) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, c[:, None]).squeeze(-1)
    assert torch.allclose(s.logprobs[row][: len(c)], expected, atol=1e-5)
    assert s.entropy.shape == gen.completion_ids.shape
    # rows 0-1 have no prompt padding: the unmasked fast path gives the same log-probs
    fast = score(model, gen.prompt_ids[:2], gen.prompt_mask[:2], gen.completion_ids[:2], gen.completion_mask[:2])
    m = gen.completion_mask[:2] == 1
    assert torch.allclose(fast.logprobs[m], s.logprobs[:2][m], atol=1e-5)


def test_sampling_config_rejects_impossible_values():
    with pytest.raises(CreditBenchError, match="top_p"):
        SamplingConfig(top_p=0)
    with pytest.raises(CreditBenchError, match="max_new_tokens"):
        SamplingConfig(max_new_tokens=0)
