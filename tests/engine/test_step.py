"""The step's plain functions (bench.engine.step) without a Trainer do exactly what the module does
with one: the same statistics, the same gradients, the same weights after the update -- fused (the
training forward is the behaviour policy; ARCA's adapter-off forward handed from scoring to the
update) and with a separate scoring forward (2 epochs x 2 minibatches, random minibatch order)."""

import copy

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from bench.config import EvalConfig, RLConfig
from bench.core import RolloutBatch
from bench.engine.module import RLVRModule
from bench.engine.placebo import Placebo
from bench.engine.scoring import score_batch
from bench.engine.step import Optimization, make_optimizer, update
from bench.models.policy import add_lora, build_tiny, char_tokenizer
from bench.registry import METHODS, TASKS

G, GROUPS, P, T = 4, 3, 6, 10


def fixed_batch(tokenizer) -> RolloutBatch:
    """:func:`mixed_batch` over ``tokenizer``'s vocabulary and padding."""
    return mixed_batch(len(tokenizer), tokenizer.pad_token_id)


def mixed_batch(vocab: int, pad: int = 0, seed: int = 0) -> RolloutBatch:
    """GROUPS groups of G completions of 3-10 tokens after 4-6 token left-padded prompts (the rows of a
    group share their prompt) over ``vocab`` tokens; every group mixes correct and wrong answers."""
    g = torch.Generator().manual_seed(seed)
    B = GROUPS * G
    prompt_ids, prompt_mask = torch.full((B, P), pad), torch.zeros(B, P, dtype=torch.long)
    for group in range(GROUPS):
        n = int(torch.randint(4, P + 1, (1,), generator=g))
        prompt_ids[group * G : (group + 1) * G, P - n :] = torch.randint(3, vocab, (n,), generator=g)
        prompt_mask[group * G : (group + 1) * G, P - n :] = 1
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    completion_mask = (torch.arange(T) < lengths[:, None]).long()
    completion_ids = torch.randint(3, vocab, (B, T), generator=g).masked_fill(completion_mask == 0, pad)
    correct = torch.rand(B, generator=g) < 0.5
    correct[0::G], correct[1::G] = True, False
    return RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        group_ids=torch.arange(GROUPS).repeat_interleave(G),
        rewards=correct.float(),
        correct=correct,
        truncated=lengths == T,
        max_new_tokens=T,
    )


class OneUpdate(RLVRModule):
    """The module's scoring and update of one fixed batch in place of training_step's rollouts."""

    def __init__(self, *args, batch: RolloutBatch, **kwargs):
        super().__init__(*args, **kwargs)
        self.batch = batch

    def training_step(self, rows, batch_idx):
        fused = self.rl.ppo_epochs == 1 and self.rl.minibatches == 1
        torch.manual_seed(7)  # the minibatch order
        self.stats = self.update(self.batch, self.score_batch(self.batch, fused))
        self.grads = {n: p.grad.clone() for n, p in self.policy.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "method_name, options, lora, epochs, minibatches",
    [
        ("grpo", {"kl_coef": 0.04}, False, 1, 1),  # fused, KL to a separate reference
        ("grpo", {"kl_coef": 0.04}, False, 2, 2),  # a scoring forward, ratios != 1 after the first step
        # fused under LoRA: the adapter-off forward goes to the update
        ("arca", {"kl_coef": 0.04, "adapted_pass": "training", "objective": "clipped"}, True, 1, 1),
        ("arca", {}, True, 1, 1),  # fused, the adapter-on states from their own scoring pass (official)
        ("arca", {"kl_coef": 0.0}, True, 1, 2),
    ],
)
def test_the_plain_update_is_the_modules_update(method_name, options, lora, epochs, minibatches):
    tok = char_tokenizer()
    base = build_tiny("tiny-500k", seed=0)[0]
    if lora:
        base = add_lora(base, rank=4, alpha=8.0, dropout=0.0, targets=["all-linear"])
        with torch.no_grad():  # a moved adapter: a nonzero residual and KL
            for n, p in base.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    ref = None if lora else build_tiny("tiny-500k", seed=1)[0].requires_grad_(False).eval()
    cls = METHODS.get(method_name)
    rl = RLConfig(
        steps=2,
        prompts_per_step=GROUPS,
        group_size=G,
        ppo_epochs=epochs,
        minibatches=minibatches,
        lr=1e-3,
        warmup_steps=1,
    )
    fused = epochs == 1 and minibatches == 1

    # without a Trainer
    policy = copy.deepcopy(base).train()
    batch = fixed_batch(tok)
    opt, sched = make_optimizer(policy, rl)
    torch.manual_seed(7)
    scored = score_batch(policy, ref, cls(cls.Config(**options)), batch, rl=rl)
    assert scored.fused == fused
    assert (scored.adapter_off is not None) == (lora and fused and options.get("adapted_pass") == "training")
    stats = update(policy, cls(cls.Config(**options)), batch, rl, opt=Optimization(opt, sched), scored=scored)
    grads = {n: p.grad for n, p in policy.named_parameters() if p.grad is not None}

    # the module under Lightning
    module = OneUpdate(
        copy.deepcopy(base),
        tok,
        cls(cls.Config(**options)),
        TASKS.get("arithmetic")(),
        "arithmetic",
        rl,
        EvalConfig(),
        ref_policy=ref,
        batch=fixed_batch(tok),
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=epochs * minibatches,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, train_dataloaders=DataLoader([0], collate_fn=lambda rows: rows))

    assert stats == module.stats and stats["loss/total"] != 0 and "credit/gini" in stats
    assert grads.keys() == module.grads.keys() and grads
    assert all(torch.equal(grads[n], module.grads[n]) for n in grads)
    after = module.policy.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in policy.state_dict().items())
    if "hidden_residual" in module.method.required:
        assert torch.equal(batch.hidden_residual, module.batch.hidden_residual) and batch.hidden_residual.max() > 0


def test_the_placebo_keeps_the_method_s_kl_term():
    """80/20 with a KL term: the placebo moves the selection the policy-gradient loss is aggregated
    over, but its KL term stays on the method's own selection, so the two totals are equal (the
    placebo keeps the loss value; a KL over the permuted tokens would not)."""
    tok, ref = char_tokenizer(), build_tiny("tiny-500k", seed=1)[0].requires_grad_(False).eval()
    base = build_tiny("tiny-500k", seed=0)[0]
    rl = RLConfig(steps=1, prompts_per_step=GROUPS, group_size=G, lr=1e-3)
    cls = METHODS.get("entropy_top")
    totals = []
    for method in (cls(cls.Config(kl_coef=0.05)), Placebo(cls(cls.Config(kl_coef=0.05)), seed=0)):
        policy, batch = copy.deepcopy(base).train(), fixed_batch(tok)
        opt, sched = make_optimizer(policy, rl)
        scored = score_batch(policy, ref, method, batch, rl=rl)
        stats = update(policy, method, batch, rl, opt=Optimization(opt, sched), scored=scored)
        totals.append((stats["loss/total"], stats["loss/kl"]))
    assert totals[0][1] > 0 and totals[1] == pytest.approx(totals[0], rel=1e-6)
