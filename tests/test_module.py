"""The RL module's other paths on a randomly initialised tiny policy loaded from a directory (no
warm-start): KL to a frozen reference, several PPO epochs and minibatches (a separate scoring
forward, ratios != 1), and a method that needs what the engine cannot compute."""

import pytest
import torch

from bench.config import EvalConfig, RLConfig
from bench.core import Method
from bench.errors import CreditBenchError
from bench.module import RLVRModule
from bench.policy import build_tiny, load_policy
from bench.rollout import SamplingConfig
from methods.grpo import GRPO, GRPOConfig


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    model, tok = build_tiny("tiny-500k", seed=0)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


class EveryTokenUp(GRPO):
    """GRPO's loss with credit +1 on every valid token, so a random policy (whose rewards are all
    0, hence zero GRPO advantage) still moves and the KL to the reference becomes positive."""

    def credit(self, batch):
        return batch.completion_mask.float()


def test_kl_and_multiple_epochs_and_minibatches(policy_dir):
    import lightning as L

    from bench.bench_step import MemoryLogger
    from bench.module import PromptDataModule
    from bench.registry import TASKS

    task = TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=500))
    model, tok = load_policy(policy_dir)
    ref, _ = load_policy(policy_dir)
    rl = RLConfig(steps=3, prompts_per_step=4, group_size=4, ppo_epochs=2, minibatches=2, lr=1e-3,
                  sampling=SamplingConfig(max_new_tokens=12))
    ev = EvalConfig(every=10, n=2, k=[1, 2], num_problems=4)
    module = RLVRModule(model, tok, EveryTokenUp(GRPOConfig(kl_coef=0.04, clip_eps=0.05)), task, "arithmetic",
                        rl, ev, ref_policy=ref)
    logger = MemoryLogger()
    trainer = L.Trainer(accelerator="cpu", max_steps=3 * 2 * 2, logger=logger, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, ev, 0))
    steps = [r for r in logger.rows if "loss/kl" in r]
    assert module.rl_step == 3 and trainer.global_step == 12, "2 epochs x 2 minibatches = 4 optimizer steps per RL step"
    assert steps[0]["loss/kl"] < steps[-1]["loss/kl"] and steps[-1]["loss/kl"] > 0
    assert max(r["train/clip_frac"] for r in steps) > 0, "later minibatches see ratios outside the clip range"
    assert steps[-1]["time/score_s"] > 0  # the behaviour log-probs came from a separate scoring forward
    assert any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    assert all(not p.requires_grad for p in ref.parameters())


def test_method_needing_what_the_engine_cannot_compute_is_refused(policy_dir):
    class NeedsResidual(Method):
        needs = frozenset({"hidden_residual"})

    model, tok = load_policy(policy_dir)
    from bench.registry import TASKS

    with pytest.raises(CreditBenchError, match="hidden_residual"):
        RLVRModule(model, tok, NeedsResidual(), TASKS.get("arithmetic")(), "arithmetic", RLConfig(), EvalConfig())
