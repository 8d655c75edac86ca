"""The RL module's other paths on a randomly initialised tiny policy loaded from a directory (no
warm-start): KL to a frozen reference, several PPO epochs and minibatches (a separate scoring
forward, ratios != 1), and a method that needs what the engine cannot compute."""

import pytest
import torch

from bench.config import EvalConfig, RLConfig, SamplingConfig
from bench.core import Method
from bench.engine.module import RLVRModule
from bench.errors import CreditBenchError
from bench.models.policy import load_policy
from methods.grpo import GRPO, GRPOConfig
from tests.fitting import fit_rows


class EveryTokenUp(GRPO):
    """GRPO's loss with credit +1 on every valid token, so a random policy (whose rewards are all
    0, hence zero GRPO advantage) still moves and the KL to the reference becomes positive."""

    def credit(self, batch):
        return batch.completion_mask.float()


def test_kl_and_multiple_epochs_and_minibatches(policy_dir):
    import lightning as L

    from bench.engine.data import PromptDataModule
    from bench.engine.fit import MemoryLogger
    from bench.registry import TASKS

    task = TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=500))
    model, tok = load_policy(policy_dir)
    ref, _ = load_policy(policy_dir)
    rl = RLConfig(
        steps=3,
        prompts_per_step=4,
        group_size=4,
        ppo_epochs=2,
        minibatches=2,
        lr=1e-3,
        sampling=SamplingConfig(max_new_tokens=12),
    )
    ev = EvalConfig(every=10, n=2, k=[1, 2], num_problems=4)
    module = RLVRModule(
        model, tok, EveryTokenUp(GRPOConfig(kl_coef=0.04, clip_eps=0.05)), task, "arithmetic", rl, ev, ref_policy=ref
    )
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=3 * 2 * 2,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, ev, 0))
    steps = [r for r in logger.rows if "loss/kl" in r]
    assert module.rl_step == 3 and trainer.global_step == 12, "2 epochs x 2 minibatches = 4 optimizer steps per RL step"
    assert steps[0]["loss/kl"] < steps[-1]["loss/kl"] and steps[-1]["loss/kl"] > 0
    assert max(r["train/clip_frac"] for r in steps) > 0, "later minibatches see ratios outside the clip range"
    assert steps[-1]["time/score_s"] > 0  # the behaviour log-probs came from a separate scoring forward
    assert "time/sync_s" not in steps[-1]  # the HF engine samples from the policy itself: nothing to sync
    assert any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert all(not p.requires_grad for p in ref.parameters())


def test_method_needing_what_the_engine_cannot_compute_is_refused(policy_dir):
    class NeedsResidual(Method):
        needs = frozenset({"hidden_residual"})

    model, tok = load_policy(policy_dir)
    from bench.registry import TASKS

    with pytest.raises(CreditBenchError, match="hidden_residual"):
        RLVRModule(model, tok, NeedsResidual(), TASKS.get("arithmetic")(), "arithmetic", RLConfig(), EvalConfig())


def _task():
    from bench.registry import TASKS

    return TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=500))


@pytest.mark.parametrize("minibatches", [1, 2])
def test_lora_arca_trains_only_the_adapter_and_reads_the_residual(policy_dir, minibatches):
    """Under LoRA only the adapter moves; the reference is the same model with the adapter off, and
    ARCA's residual is zero at the first step (LoRA's B starts at 0: uniform weights, Gini 0) and
    positive once the adapter has moved. Fused (1 minibatch) and separate-scoring paths both."""
    from bench.models.policy import add_lora
    from methods.arca import ARCA, ARCAConfig, token_weights

    class ArcaEveryTokenUp(ARCA):  # a random policy earns no reward: push every token, ARCA-weighted
        def credit(self, batch):
            self.seen.append(batch.hidden_residual.clone())
            return token_weights(batch.hidden_residual, batch.completion_mask, ARCAConfig(scale="mean_one"))

    model, tok = load_policy(policy_dir)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    policy = add_lora(model, rank=4, alpha=8.0, dropout=0.0, targets=["all-linear"])
    method = ArcaEveryTokenUp(ARCAConfig(kl_coef=0.04))
    method.seen = []
    rl = RLConfig(
        steps=3,
        prompts_per_step=2,
        group_size=4,
        minibatches=minibatches,
        lr=5e-3,
        sampling=SamplingConfig(max_new_tokens=10),
    )
    module = RLVRModule(policy, tok, method, _task(), "arithmetic", rl, EvalConfig(num_problems=4))
    rows = fit_rows(module, _task(), rl, 3)
    assert float(method.seen[0].abs().max()) == 0.0 and float(method.seen[-1].min()) > 0
    assert rows[0]["credit/gini"] == pytest.approx(0.0, abs=1e-6) and rows[-1]["credit/gini"] > 0
    assert rows[-1]["loss/kl"] > 0  # the adapter-off reference differs from the adapted policy
    trained = {
        k.replace(".base_layer", ""): v for k, v in policy.get_base_model().state_dict().items() if "lora_" not in k
    }
    for k, v in base.items():
        assert torch.equal(trained[k], v), f"base weight {k} changed"
    assert any(float(p.detach().abs().sum()) > 0 for n, p in policy.named_parameters() if "lora_B" in n)


def test_dynamic_sampling_refills_the_batch_with_fresh_prompts(policy_dir):
    """A method that keeps only even-numbered groups: each step's first rollout keeps 2 of 4 groups,
    a second rollout of 4 fresh prompts supplies 2 more, so the update sees a full batch of 4 groups
    (16 rows) while 32 samples were generated and counted."""

    class KeepEven(EveryTokenUp):
        generation_rounds = 3

        def keep_groups(self, batch):
            ids = torch.arange(int(batch.group_ids.max()) + 1)
            return ids % 2 == 0

    model, tok = load_policy(policy_dir)
    rl = RLConfig(steps=2, prompts_per_step=4, group_size=4, lr=1e-3, sampling=SamplingConfig(max_new_tokens=8))
    module = RLVRModule(
        model, tok, KeepEven(GRPOConfig(kl_coef=0.0)), _task(), "arithmetic", rl, EvalConfig(num_problems=4)
    )
    rows = fit_rows(module, _task(), rl, 2)
    assert [r["train/batch_size"] for r in rows] == [16, 16]
    assert [r["train/generation_rounds"] for r in rows] == [2, 2]
    assert module.samples == 2 * 32 and rows[-1]["train/samples"] == 64


def test_sampler_continues_forced_prefixes_within_the_budget(policy_dir):
    """The engine's Sampler (the module's ``sampler``, which IBPO's augment gets): each new row is
    the old row's prompt, the given prefix, then the policy's continuation, cut at the generation
    budget, verified against the same problem."""
    model, tok = load_policy(policy_dir)
    rl = RLConfig(prompts_per_step=2, group_size=2, sampling=SamplingConfig(max_new_tokens=12))
    task = _task()
    module = RLVRModule(model, tok, EveryTokenUp(GRPOConfig(kl_coef=0.0)), task, "arithmetic", rl, EvalConfig())
    rows = [task.load("train")[i] for i in range(2)]
    batch, _ = module.sampler.rollout(rows, 2, rl.sampling, details=False)
    prefixes = [
        torch.tensor(tok.encode("12", add_special_tokens=False)),
        torch.tensor(tok.encode("\\boxed{", add_special_tokens=False)),
    ]
    before = module.samples
    new = module.sampler.complete(batch, torch.tensor([1, 2]), prefixes)
    assert new.size == 2 and new.group_ids.tolist() == [0, 1] and new.rows == [rows[0], rows[1]]
    assert new.completions[0].startswith("12") and new.completions[1].startswith("\\boxed{")
    assert new.completion_ids.shape[1] == 12 and torch.equal(new.prompt_ids, batch.prompt_ids[[1, 2]])
    assert new.rewards.shape == (2,) and module.samples == before + 2


def test_a_separate_engine_sleeps_after_the_rollouts_and_is_synced_after_each_update(policy_dir):
    """An engine that holds its own copy of the weights (``separate``, as vLLM) frees its memory once
    the step's rollouts are done and gets the new weights after every update, timed as time/sync_s."""
    from bench.engine.rollout import HFRolloutEngine

    class Separate(HFRolloutEngine):
        separate = True

        def sleep(self):
            calls.append("sleep")

        def sync(self, policy):
            calls.append("sync")
            assert policy is model

    calls = []
    model, tok = load_policy(policy_dir)
    rl = RLConfig(steps=2, prompts_per_step=2, group_size=2, lr=1e-3, sampling=SamplingConfig(max_new_tokens=6))
    module = RLVRModule(
        model,
        tok,
        EveryTokenUp(GRPOConfig(kl_coef=0.0)),
        _task(),
        "arithmetic",
        rl,
        EvalConfig(num_problems=4),
        engine=Separate(model, tok),
    )
    rows = fit_rows(module, _task(), rl, 2)
    assert calls == ["sleep", "sync"] * 2
    assert len(rows) == 2 and all(r["time/sync_s"] >= 0 for r in rows)


class FirstCharIsDigit:
    """A verifier a random policy often satisfies (so groups are mixed): correct iff the completion
    starts with a digit. Wraps the arithmetic task's data and prompts."""

    def __init__(self):
        self.inner = _task()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def verify(self, completions, rows, details=True):
        from bench.core import Outcome

        return [Outcome(float(c[:1].isdigit()), c[:1].isdigit()) for c in completions]


def _ibpo_run(policy_dir, steps: int, **options) -> tuple[list, list[dict], RLVRModule]:
    """``steps`` RL steps of IBPO with ``options`` on the real engine: the batches credit() saw,
    the logged rows and the module."""
    from methods.ibpo import IBPO, IBPOConfig

    seen = []

    class Recording(IBPO):
        def credit(self, batch):
            seen.append(batch)
            return super().credit(batch)

    model, tok = load_policy(policy_dir)
    rl = RLConfig(steps=steps, prompts_per_step=4, group_size=4, lr=1e-3, sampling=SamplingConfig(max_new_tokens=8))
    task = FirstCharIsDigit()
    method = Recording(IBPOConfig(kl_coef=0.0, **options))
    module = RLVRModule(model, tok, method, task, "arithmetic", rl, EvalConfig(num_problems=4))
    return seen, fit_rows(module, task.inner, rl, steps), module


def test_ibpo_repair_mode_trains_through_the_real_sampler(policy_dir):
    """IBPO's repair mode on the real engine: repaired rows (spliced prefix + policy continuation)
    join the batch before scoring, are scored and trained on, and their generation is counted."""
    seen, rows, module = _ibpo_run(policy_dir, 3, mode="diff_credit", repair=True)
    repaired = [int(b.extra["repair"].sum()) for b in seen]
    assert sum(repaired) > 0, "some step had an incorrect row with a correct sibling"
    for b, n in zip(seen, repaired):
        assert b.size == 16 + n and b.old_logprobs.shape == b.completion_ids.shape
    assert module.samples == 3 * 16 + sum(repaired)
    assert [r["train/batch_size"] for r in rows] == [16 + n for n in repaired]


def test_ibpo_shaping_revises_through_the_real_sampler(policy_dir):
    """IBPO's default mode on the real engine: every incorrect row (each has siblings) is revised by
    the policy through Sampler.generate, counted apart from the training samples (the sample budget
    counts what trains); the verdicts reach credit() per row, and the revisions are not trained on
    (the batch keeps its size)."""
    seen, rows, module = _ibpo_run(policy_dir, 2)
    revised = [int(b.extra["revisions"].sum()) for b in seen]
    assert [b.size for b in seen] == [16, 16] and [r["train/batch_size"] for r in rows] == [16, 16]
    assert revised == [int((~b.correct).sum()) for b in seen] and sum(revised) > 0
    assert all((b.extra["revisions_correct"] <= b.extra["revisions"]).all() for b in seen)
    assert module.samples == 2 * 16 and module.sampler.extra == sum(revised)
