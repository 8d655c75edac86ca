"""Gradient accumulation by token budget (bench.engine.microbatch): how a minibatch is split, and
that the accumulated gradient equals the unsplit update's for every aggregation -- token-mean,
seq-mean-token-mean (with a KL term), seq-mean-token-sum, seq-mean-token-sum-norm (the global-count
modes) -- for the 80/20 rule's top-rho tokens of each minibatch with its kept-token denominator, for
GSPO's sequence ratio, for ARCA under LoRA, fused (one minibatch) and over 2 epochs x 2 minibatches.
Under DDP: tests/engine/test_ddp.py."""

import copy

import pytest
import torch

from bench.config import RLConfig, SamplingConfig
from bench.engine import microbatch
from bench.engine.scoring import is_fused, score_batch
from bench.engine.step import Optimization, update
from bench.errors import CreditBenchError
from bench.models.policy import add_lora, build_tiny, char_tokenizer
from bench.registry import METHODS
from tests.engine.test_step import GROUPS, G, T, fixed_batch

BUDGET = 40  # tokens: the 12 rows of the fixed batch (7-16 tokens each) go in 4-6 micro-batches


class Recorded(torch.optim.SGD):
    """SGD with lr 0 that keeps the gradient each step found: the weights stay, so a split and an
    unsplit update see the same policy at every step."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append([p.grad.detach().clone() for p in self.param_groups[0]["params"]])
        return super().step(closure)


def setup(method_name: str, options: dict, lora: bool = False):
    """The tiny policy (with a non-zero adapter under LoRA), its reference where the method needs
    one, the method and the fixed batch."""
    tok = char_tokenizer()
    policy = build_tiny("tiny-500k", seed=0)[0]
    if lora:
        policy = add_lora(policy, 4, 8.0, 0.0, ["q_proj", "v_proj"])
        with torch.no_grad():  # a trained-looking adapter: the adapter-on and -off passes differ
            for n, p in policy.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    cls = METHODS.get(method_name)
    method = cls(cls.Config(**options))
    ref = build_tiny("tiny-500k", seed=1)[0] if method.config.kl_coef > 0 and not lora else None
    return policy, ref, method, fixed_batch(tok)


def rl_config(budget: int, epochs: int = 1, minibatches: int = 1) -> RLConfig:
    return RLConfig(
        prompts_per_step=GROUPS,
        group_size=G,
        ppo_epochs=epochs,
        minibatches=minibatches,
        grad_clip=0.0,
        micro_batch_tokens=budget,
        sampling=SamplingConfig(max_new_tokens=T),
    )


def run(method_name: str, options: dict, budget: int, epochs: int = 1, minibatches: int = 1, lora: bool = False):
    """The update under ``budget`` of the fixed batch, scored once by an unsplit scoring pass (so
    both updates start from bitwise the same behaviour log-probs and entropies): the gradients of
    every optimizer step, the statistics, and how many micro-batches the batch had."""
    policy, ref, method, batch = setup(method_name, options, lora)
    scored = score_batch(policy, ref, method, batch, rl=rl_config(0, epochs, minibatches), fused=False)
    rl = rl_config(budget, epochs, minibatches)
    opt = Recorded([p for p in policy.parameters() if p.requires_grad])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    torch.manual_seed(7)  # the minibatch order
    stats = update(policy, method, batch, rl, opt=Optimization(opt, sched), scored=scored)
    return {"grads": opt.grads, "stats": stats, "parts": len(microbatch.split(batch, budget))}


def max_diff(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> tuple[float, float]:
    assert len(a) == len(b)
    diff = max(float((x - y).abs().max()) for sa, sb in zip(a, b) for x, y in zip(sa, sb))
    scale = max(float(x.abs().max()) for sa in a for x in sa)
    return diff, scale


CASES = {
    "token-mean": ("grpo", {"aggregation": "token-mean"}),
    "seq-mean-token-mean + KL": ("grpo", {"kl_coef": 0.04}),
    "seq-mean-token-sum": ("grpo", {"aggregation": "seq-mean-token-sum"}),
    "seq-mean-token-sum-norm": ("dr_grpo", {}),
    "DAPO (token-mean, overlong filter)": ("dapo", {"overlong_filter": True}),
    "80/20 minibatch top-k, kept-token mean": ("entropy_top", {"denominator": "selected"}),
    "GSPO sequence ratio": ("gspo", {}),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2)], ids=["1x1", "2x2"])
def test_accumulated_gradient_equals_the_unsplit_update(case, shape):
    """Every optimizer step's gradient and the logged loss of the split update equal the unsplit
    one's to float precision (max |d grad| < 1e-6 relative to the largest gradient, 1e-2 to 3)."""
    name, options = CASES[case]
    one = run(name, options, 0, *shape)
    split = run(name, options, BUDGET, *shape)
    assert split["parts"] > 2
    diff, scale = max_diff(one["grads"], split["grads"])
    message = f"{case}: max |grad difference| {diff:.2e} (largest grad {scale:.2e})"
    assert diff < 1e-6 * max(scale, 1.0) and scale > 1e-2, message
    for key in ("loss/total", "train/clip_frac", "credit/nonzero_frac"):
        if key in one["stats"]:
            assert split["stats"][key] == pytest.approx(one["stats"][key], abs=1e-6), key


def test_arca_under_lora_accumulates_to_the_unsplit_gradient():
    """ARCA's residual credit (adapter-on vs adapter-off hidden states) from split scoring passes."""
    one = run("arca", {}, 0, 2, 2, lora=True)
    split = run("arca", {}, BUDGET, 2, 2, lora=True)
    diff, scale = max_diff(one["grads"], split["grads"])
    assert diff < 1e-6 and scale > 1e-4, f"max |grad difference| {diff:.2e} (largest grad {scale:.2e})"


@pytest.mark.parametrize(
    ("name", "options", "lora"), [("grpo", {"kl_coef": 0.04}, False), ("arca", {}, True), ("entropy_top", {}, False)]
)
def test_split_scoring_passes_equal_the_unsplit_ones(name, options, lora):
    """Behaviour and reference log-probs, entropies and ARCA's residuals from micro-batches equal the
    whole batch's to float precision on every completion token. (Not bitwise: the G rows of a group
    share their first token's entropy exactly in one pass but only to ~1e-7 across micro-batches, so a
    top-k selection may break such a tie the other way.) A batch that splits is never fused."""
    policy, ref, method, whole = setup(name, options, lora)
    split = copy.deepcopy(whole)
    score_batch(policy, ref, method, whole, rl=rl_config(0), fused=False)
    score_batch(policy, ref, method, split, rl=rl_config(BUDGET), fused=False)
    mask = whole.completion_mask.bool()
    fields = [f for f in microbatch.SCORED if getattr(whole, f) is not None and f != "hidden_states"]
    assert {"old_logprobs", "entropy"} <= set(fields) and ("hidden_residual" in fields) == lora
    for f in fields:
        assert float((getattr(whole, f) - getattr(split, f))[mask].abs().max()) < 1e-5, f
    assert is_fused(whole, rl_config(0)) and not is_fused(whole, rl_config(BUDGET))
    assert not is_fused(whole, rl_config(0, 1, 2))


def test_split_packs_sorted_rows_within_the_budget():
    batch = fixed_batch(char_tokenizer())
    parts = microbatch.split(batch, BUDGET)
    assert sorted(torch.cat(parts).tolist()) == list(range(batch.size))  # every row once
    assert all(microbatch.padded_tokens(batch, p) <= BUDGET for p in parts)
    # sorted by length: less padding than the same number of micro-batches taken in order
    in_order = torch.arange(batch.size).tensor_split(len(parts))
    assert sum(microbatch.padded_tokens(batch, p) for p in parts) < sum(
        microbatch.padded_tokens(batch, p) for p in in_order
    )
    assert [p.tolist() for p in microbatch.split(batch, 0)] == [list(range(batch.size))]
    assert [p.tolist() for p in microbatch.split(batch, 10_000)] == [list(range(batch.size))]


def test_a_budget_smaller_than_one_sequence_is_refused_in_one_line():
    batch = fixed_batch(char_tokenizer())
    longest = int(microbatch.lengths(batch).max())
    with pytest.raises(CreditBenchError, match=f"smaller than one sequence: a rollout of {longest} tokens") as e:
        microbatch.split(batch, longest - 1)
    assert "\n" not in str(e.value)
    with pytest.raises(CreditBenchError, match=r"rl.micro_batch_tokens \(8\) is smaller than one sequence"):
        RLConfig(micro_batch_tokens=8, sampling=SamplingConfig(max_new_tokens=36))
    with pytest.raises(CreditBenchError, match="micro_batch_tokens"):
        RLConfig(micro_batch_tokens=-1)


def test_write_back_fills_each_row_from_its_micro_batch():
    batch = fixed_batch(char_tokenizer())
    whole = copy.deepcopy(batch)
    whole.old_logprobs = torch.randn(batch.size, T)
    whole.extra["x"] = torch.randn(batch.size, 3)
    for index in microbatch.split(batch, BUDGET):
        microbatch.write_back(batch, whole.select(index), index)
    assert torch.equal(batch.old_logprobs, whole.old_logprobs) and torch.equal(batch.extra["x"], whole.extra["x"])


@pytest.mark.parametrize("budget", [0, BUDGET])
def test_each_optimizer_step_starts_from_zero_gradients(budget):
    """With lr 0 and two epochs of one minibatch, both optimizer steps see the same weights and the
    same rows: their gradients must be equal, not the second the sum of both."""
    grads = run("grpo", {"kl_coef": 0.0}, budget, epochs=2, minibatches=1)["grads"]
    assert len(grads) == 2
    assert max(float((a - b).abs().max()) for a, b in zip(*grads)) == 0.0
