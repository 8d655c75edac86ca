"""What the engine offers a method beyond log-probs: the behaviour policy's hidden states, ARCA's
adapter-on states from their own pass, a method-supplied loss mask, scalar diagnostics, and the
Sampler's ``generate`` (new prompts, verified) and ``logprobs`` (the batch's completions after
other prompts), on a real tiny policy and the arithmetic task."""

import copy
from dataclasses import dataclass

import pytest
import torch

from bench.config import RLConfig, SamplingConfig
from bench.core import LossOutput, Method, MethodConfig, RolloutBatch
from bench.engine.rollout import HFRolloutEngine
from bench.engine.sampling import RolloutSampler
from bench.engine.scoring import Scored, score, score_batch
from bench.engine.step import Optimization, make_optimizer, update
from bench.models.policy import add_lora, build_tiny
from bench.numerics import aggregate
from bench.registry import TASKS

G = 4


@pytest.fixture(scope="module")
def setup():
    policy, tok = build_tiny("tiny-500k", seed=0)
    task = TASKS.get("arithmetic")()
    sampling = SamplingConfig(max_new_tokens=12)
    sampler = RolloutSampler(HFRolloutEngine(policy, tok), tok, task, sampling, policy=policy)
    torch.manual_seed(0)
    batch, _ = sampler.rollout(list(task.load("train").select(range(3))), G, sampling, details=False)
    batch.rewards[0::G], batch.rewards[1::G] = 1.0, 0.0  # every group mixed
    return policy, tok, task, sampler, batch


@dataclass(frozen=True)
class ProbeConfig(MethodConfig):
    drop_first_row: bool = False


class Probe(Method):
    """Advantage +-1 by reward on every token; records what the engine handed it."""

    Config = ProbeConfig
    needs = frozenset({"hidden_states"})
    seen: list = []

    def credit(self, batch: RolloutBatch) -> torch.Tensor:
        Probe.seen.append(batch.hidden_states)
        return (2 * batch.rewards - 1)[:, None].expand_as(batch.completion_mask).float()

    def loss(self, batch, logprobs, credit):
        mask = batch.completion_mask.clone()
        if self.config.drop_first_row:
            mask[0] = 0
        return LossOutput(-credit * logprobs, mask=mask, scalars={"rows": torch.tensor(float(batch.size))})


@pytest.mark.parametrize("fused", [True, False])
def test_hidden_states_are_the_behaviour_policys(setup, fused):
    """Fused: from the training forward; else from the scoring forward. Either equals score()'s."""
    policy, _, _, _, batch = setup
    policy = copy.deepcopy(policy)
    rl = RLConfig(steps=1, prompts_per_step=3, group_size=G, minibatches=1 if fused else 2, lr=1e-3)
    Probe.seen = []
    b = RolloutBatch.concat([batch])  # a copy
    with torch.no_grad():
        want = score(policy, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask, with_hidden=True).hidden
    opt, sched = make_optimizer(policy, rl)
    scored = score_batch(policy, None, Probe(), b, rl=rl, fused=fused)
    update(policy, Probe(), b, rl, opt=Optimization(opt, sched), scored=scored)
    assert Probe.seen[-1].shape == want.shape
    torch.testing.assert_close(Probe.seen[-1], want, atol=1e-5, rtol=1e-5)


def test_a_method_loss_mask_sets_the_denominator_and_scalars_are_logged(setup):
    """token-mean over the mask the method returns: row 0 leaves the loss and its token count."""
    policy, _, _, _, batch = setup
    policy = copy.deepcopy(policy)
    rl = RLConfig(steps=1, prompts_per_step=3, group_size=G, lr=1e-3)
    b = RolloutBatch.concat([batch])
    method = Probe(ProbeConfig(drop_first_row=True))
    with torch.no_grad():
        s = score(policy, b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask, with_entropy=False)
    lp = s.logprobs
    opt, sched = make_optimizer(policy, rl)
    stats = update(policy, method, b, rl, opt=Optimization(opt, sched), scored=Scored(fused=True))
    credit = (2 * b.rewards - 1)[:, None].expand_as(lp)
    mask = b.completion_mask.clone()
    mask[0] = 0
    want = float(aggregate(-credit * lp, mask, "token-mean"))
    assert stats["loss/total"] == pytest.approx(want, rel=1e-5)
    assert float(aggregate(-credit * lp, b.completion_mask, "token-mean")) != pytest.approx(want, rel=1e-3)
    assert stats["train/rows"] == b.size


def test_the_adapter_on_states_from_their_own_pass():
    """hidden_residual_separate: scoring computes the residual itself (nothing handed to the
    update); without dropout it equals the residual taken against the training forward."""
    from bench.registry import METHODS

    base, tok = build_tiny("tiny-500k", seed=0)
    policy = add_lora(base, rank=4, alpha=8.0, dropout=0.0, targets=["all-linear"])
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    task = TASKS.get("arithmetic")()
    sampling = SamplingConfig(max_new_tokens=12)
    sampler = RolloutSampler(HFRolloutEngine(policy, tok), tok, task, sampling, policy=policy)
    torch.manual_seed(0)
    batch, _ = sampler.rollout(list(task.load("train").select(range(2))), G, sampling, details=False)
    rl = RLConfig(steps=1, prompts_per_step=2, group_size=G, lr=1e-3)
    arca = METHODS.get("arca")
    separate, shared = RolloutBatch.concat([batch]), RolloutBatch.concat([batch])
    assert (
        score_batch(policy, None, arca(arca.Config(adapted_pass="separate")), separate, rl=rl, fused=True).adapter_off
        is None
    )
    scored = score_batch(policy, None, arca(arca.Config(adapted_pass="training")), shared, rl=rl, fused=True)
    assert scored.adapter_off is not None and shared.hidden_residual is None
    opt, sched = make_optimizer(policy, rl)
    training = arca(arca.Config(adapted_pass="training"))
    update(copy.deepcopy(policy), training, shared, rl, opt=Optimization(opt, sched), scored=scored)
    assert float(separate.hidden_residual.max()) > 0
    torch.testing.assert_close(separate.hidden_residual, shared.hidden_residual, atol=1e-5, rtol=1e-5)


def test_sampler_generate_verifies_and_counts(setup):
    policy, _, task, sampler, batch = setup
    rows = batch.rows[:2]
    before = sampler.samples, sampler.tokens, sampler.extra
    out = sampler.generate([batch.prompts[0], batch.prompts[0] + "1"], rows)
    assert out.size == 2 and out.group_ids.tolist() == [0, 1] and len(out.completions) == 2
    assert out.rewards.tolist() == [o.reward for o in task.verify(out.completions, rows)]
    # the method's own generations: in the tokens and apart from the training samples (the sample budget)
    assert sampler.tokens == before[1] + int(out.lengths.sum())
    assert sampler.samples == before[0] and sampler.extra == before[2] + 2


def test_sampler_logprobs_after_other_prompts(setup):
    """The same prompts give the training forward's log-probs; a changed prompt changes them."""
    policy, _, _, sampler, batch = setup
    with torch.no_grad():
        want = score(policy, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask).logprobs
    same = sampler.logprobs(batch, batch.prompts)
    torch.testing.assert_close(same, want.masked_fill(batch.completion_mask == 0, 0.0), atol=1e-5, rtol=1e-5)
    other = sampler.logprobs(batch, ["9*9=" + p for p in batch.prompts])
    assert other.shape == same.shape and not torch.allclose(other, same)
    assert bool((other[batch.completion_mask == 0] == 0).all())
