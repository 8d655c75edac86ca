"""The chunked LM head (bench.engine.lm_head) computes what the whole head computes: log-probs,
entropies and gradients within 1e-5 in float32, on a tiny policy (the lean forward, the model's own
forward, under LoRA) and on a randomly initialised 2-layer Qwen3 model with the Qwen3 vocabulary;
every registered method's update is unchanged with it forced on; the tiny policies never take it by
default."""

import copy

import pytest
import torch

from bench.config import RLConfig
from bench.core import RolloutBatch
from bench.engine import lm_head
from bench.engine.scoring import score, score_batch
from bench.engine.step import Optimization, make_optimizer, update
from bench.errors import CreditBenchError
from bench.models.policy import add_lora, build_tiny
from bench.registry import METHODS
from tests.engine.test_step import GROUPS, G, mixed_batch

QWEN3_VOCAB = 151936


def _batch(vocab: int, pad: int = 0, seed: int = 0) -> RolloutBatch:
    """test_step's mixed batch with every optional field a method may read filled."""
    b = mixed_batch(vocab, pad, seed)
    g = torch.Generator().manual_seed(seed + 1)
    b.extra = {"negative_logprobs": -torch.rand(b.completion_ids.shape, generator=g) - 0.1}
    return b


def _scores(model, b: RolloutBatch, chunk_elements: int, grad: bool, **kw):
    """score()'s outputs and, with ``grad``, the parameters' gradients of a random weighting of the
    log-probs (zero-padded positions included: they must agree too)."""
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        s = score(
            model,
            b.prompt_ids,
            b.prompt_mask,
            b.completion_ids,
            b.completion_mask,
            0.7,
            chunk_elements=chunk_elements,
            **kw,
        )
    grads = {}
    if grad:
        w = torch.randn(s.logprobs.shape, generator=torch.Generator().manual_seed(1))
        (s.logprobs * w).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return s, grads


def _assert_same(model, b: RolloutBatch, chunk_elements: int, grads=(False, True), **kw) -> None:
    """Whole and chunked head agree within 1e-5: log-probs, entropies, hidden states and gradients
    (without and with gradient: ``grads``)."""
    for grad in grads:
        whole, whole_grads = _scores(model, b, 0, grad, **kw)
        chunked, chunked_grads = _scores(model, b, chunk_elements, grad, **kw)
        assert chunked.logprobs.requires_grad == grad
        assert chunked.entropy is not None and not chunked.entropy.requires_grad
        torch.testing.assert_close(chunked.logprobs, whole.logprobs, atol=1e-5, rtol=0)
        torch.testing.assert_close(chunked.entropy, whole.entropy, atol=1e-5, rtol=0)
        if kw.get("with_hidden"):
            torch.testing.assert_close(chunked.hidden, whole.hidden, atol=1e-6, rtol=0)
        assert chunked_grads.keys() == whole_grads.keys()
        for name, want in whole_grads.items():
            scale = max(float(want.abs().max()), 1e-12)
            assert float((chunked_grads[name] - want).abs().max()) <= 1e-5 * scale, name


def test_chunk_tokens_engages_only_above_the_threshold():
    assert lm_head.chunk_tokens(100, 1000, 100_000) == 0  # exactly at the threshold: the whole head
    assert lm_head.chunk_tokens(101, 1000, 100_000) == 100
    assert lm_head.chunk_tokens(8 * 512, QWEN3_VOCAB, lm_head.CHUNK_ELEMENTS) == 441
    assert lm_head.chunk_tokens(10**9, QWEN3_VOCAB, 0) == 0  # 0: never
    assert lm_head.chunk_tokens(10, QWEN3_VOCAB, 1000) == 1  # at least one token a chunk
    with pytest.raises(CreditBenchError, match="lm_head_chunk_elements"):
        RLConfig(lm_head_chunk_elements=-1)


@pytest.fixture(scope="module")
def tiny():
    model, tok = build_tiny("tiny-500k", seed=0)
    return model, _batch(len(tok), tok.pad_token_id)


@pytest.mark.parametrize("with_hidden", [False, True], ids=["lean", "model-forward"])
def test_the_chunked_head_is_the_whole_head_on_a_tiny_policy(tiny, with_hidden):
    """7 tokens a chunk (the last chunk shorter); the final norm's hook takes the model's own forward."""
    model, b = tiny
    vocab = model.config.vocab_size
    assert lm_head.head_weight(model) is model.lm_head.weight
    _assert_same(model, b, 7 * vocab, with_hidden=with_hidden)


def test_the_chunked_head_is_the_whole_head_under_lora(tiny):
    model, b = tiny
    policy = add_lora(copy.deepcopy(model), 4, 8.0, 0.0, ["all-linear"])
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)  # an adapter that changes the outputs
    assert lm_head.head_weight(policy) is not None
    _assert_same(policy, b, 7 * model.config.vocab_size)
    with policy.disable_adapter():  # the reference pass under LoRA: nothing in it trains
        _assert_same(policy, b, 7 * model.config.vocab_size, grads=(False,))


def test_the_chunked_head_is_the_whole_head_with_the_qwen3_vocabulary():
    """A randomly initialised 2-layer Qwen3 (hidden size 64, tied embeddings) over 151,936 words: the
    embedding's gradient gathers the head's and the input's."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        vocab_size=QWEN3_VOCAB,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(cfg)
    b = _batch(QWEN3_VOCAB)
    # the default threshold: 120 tokens x 151,936 words stay whole; 5 tokens a chunk when forced
    assert lm_head.chunk_tokens(b.completion_ids.numel(), QWEN3_VOCAB, lm_head.CHUNK_ELEMENTS) == 0
    _assert_same(model, b, 5 * QWEN3_VOCAB)
    _assert_same(model, b, 5 * QWEN3_VOCAB, with_hidden=True)


def test_where_the_head_is_not_a_plain_linear_the_model_gives_the_logits(tiny):
    model, b = tiny
    hooked = copy.deepcopy(model)
    hooked.lm_head.register_forward_hook(lambda m, a, out: out * 2)
    assert lm_head.head_weight(hooked) is None
    with torch.no_grad():
        doubled = score(hooked, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask, chunk_elements=1)
        plain = score(model, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask, chunk_elements=0)
    assert not torch.allclose(doubled.logprobs, plain.logprobs)  # the hook's logits, not the chunked head's


def _update(method_name: str, base, chunk_elements: int):
    """One update of the fixed rollouts by the method's default config (a scoring pass, then 2
    minibatches): its statistics and the last minibatch's gradients."""
    cls = METHODS.get(method_name)
    method = cls(cls.Config())
    lora = bool(method.required & {"hidden_residual", "hidden_residual_separate"})
    policy = copy.deepcopy(base)
    torch.manual_seed(0)  # the adapter's initialisation
    policy = add_lora(policy, 4, 8.0, 0.0, ["all-linear"]) if lora else policy
    ref = None if lora else copy.deepcopy(base).eval()
    # a learning rate so small that AdamW's first step (about lr a weight, whatever the gradient's size)
    # leaves the second minibatch's gradient as it was: the gradients compared are the head's
    rl = RLConfig(prompts_per_step=GROUPS, group_size=G, minibatches=2, lr=1e-10, lm_head_chunk_elements=chunk_elements)
    opt, sched = make_optimizer(policy, rl)
    b = _batch(base.config.vocab_size)
    torch.manual_seed(7)  # the minibatch order
    scored = score_batch(policy, ref, method, b, rl=rl)
    stats = update(policy, method, b, rl, opt=Optimization(opt, sched), scored=scored)
    return stats, {n: p.grad for n, p in policy.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", METHODS.names())
def test_every_methods_update_is_unchanged_by_the_chunked_head(tiny, name, monkeypatch):
    model, _ = tiny
    want, want_grads = _update(name, model, 0)
    calls = []
    chunked = lm_head.logprobs_entropy
    monkeypatch.setattr(lm_head, "logprobs_entropy", lambda *a, **k: calls.append(a[4]) or chunked(*a, **k))
    got, got_grads = _update(name, model, 7 * model.config.vocab_size)
    assert calls and set(calls) == {7}  # the scoring and training forwards took the chunked head
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key
    for n, g in want_grads.items():
        assert float((got_grads[n] - g).abs().max()) <= 1e-5 * max(float(g.abs().max()), 1e-12), n
