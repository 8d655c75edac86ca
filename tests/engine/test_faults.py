"""Numerical faults: a NaN or inf in the loss or the gradients never reaches the weights or AdamW's
state; the update is skipped and counted, and too many skips stop the run with a clear error."""

import warnings

import pytest
import torch

from bench.errors import CreditBenchError


def _module(policy_dir, poison_steps: set[int], max_skipped: int, what: str = "loss"):
    from bench.config import EvalConfig, RLConfig, SamplingConfig
    from bench.engine.module import RLVRModule
    from bench.models.policy import load_policy
    from bench.registry import METHODS, TASKS
    from methods.grpo import GRPO

    class Faulty(GRPO):
        """GRPO with credit +1 on every token (a random policy earns no reward, so GRPO's own credit
        would not move it), whose loss (or gradient) turns NaN/inf at the given RL steps: an
        injected fault."""

        def credit(self, batch):
            return batch.completion_mask.float()

        def loss(self, batch, logprobs, credit):
            out = super().loss(batch, logprobs, credit)
            step = module.rl_step + 1
            if step in poison_steps:
                if what == "loss":
                    out.loss = out.loss * float("nan")
                else:  # a finite loss whose gradient is inf
                    out.loss = out.loss + _InfGrad.apply(logprobs)
            return out

    policy, tok = load_policy(str(policy_dir))
    task = TASKS.get("arithmetic")()
    rl = RLConfig(
        steps=4,
        prompts_per_step=2,
        group_size=4,
        max_skipped_updates=max_skipped,
        sampling=SamplingConfig(max_new_tokens=12),
    )
    module = RLVRModule(
        policy, tok, Faulty(METHODS.get("grpo").Config(kl_coef=0.0)), task, "arithmetic", rl, EvalConfig()
    )
    return module, task, rl


class _InfGrad(torch.autograd.Function):
    """Zero in the forward pass, inf in the backward pass."""

    @staticmethod
    def forward(ctx, x):
        return torch.zeros_like(x)

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("inf"))


def _weights(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.policy.state_dict().items()}


@pytest.mark.parametrize("what", ["loss", "grad"])
def test_a_nonfinite_update_is_skipped_and_counted(policy_dir, what):
    from tests.fitting import fit_rows

    module, task, rl = _module(policy_dir, {2}, max_skipped=3, what=what)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = fit_rows(module, task, rl, 4)
    # rows with a loss: steps 1, 3 and 4 (the skipped step 2 has none to report)
    assert [r["train/skipped_updates"] for r in rows] == [0.0, 1.0, 1.0]
    assert module.rl_step == 4 and module.skipped_updates == 1
    # the run's result keeps the count and the largest finite gradient norm of the steps that logged one
    summary = module.train_summary()
    assert summary["train_skipped_updates"] == 1.0
    assert summary["train_grad_norm_max"] == max(r["train/grad_norm"] for r in rows if "train/grad_norm" in r)
    assert any("update skipped, weights unchanged" in str(w.message) for w in caught)
    assert all(torch.isfinite(v).all() for v in module.policy.state_dict().values())


def test_the_skipped_update_leaves_weights_and_optimizer_state_as_they_were(policy_dir):
    import lightning as L

    from bench.config import EvalConfig
    from bench.engine.data import PromptDataModule
    from bench.engine.fit import MemoryLogger

    module, task, rl = _module(policy_dir, {2}, max_skipped=3)
    snapshots = {}

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            snapshots[pl_module.rl_step + 1] = (
                _weights(pl_module),
                {
                    k: (v["exp_avg"].clone(), v["exp_avg_sq"].clone(), float(v["step"]))
                    for k, v in pl_module.optimizers().optimizer.state.items()
                },
            )

    trainer = L.Trainer(
        accelerator="cpu",
        logger=MemoryLogger(),
        callbacks=[Watch()],
        max_steps=-1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, EvalConfig(num_problems=4), 0))
    assert module.rl_step == 4 and module.skipped_updates == 1
    w2, adam2 = snapshots[2]  # before the poisoned step 2
    w3, adam3 = snapshots[3]  # after it
    assert all(torch.equal(w2[k], w3[k]) for k in w2)
    assert adam2.keys() == adam3.keys() and all(
        torch.equal(adam2[k][0], adam3[k][0]) and torch.equal(adam2[k][1], adam3[k][1]) and adam2[k][2] == adam3[k][2]
        for k in adam2
    )
    w4, _ = snapshots[4]
    assert any(not torch.equal(w3[k], w4[k]) for k in w3)  # the next step updates again


def test_too_many_nonfinite_updates_stop_the_run_with_a_clear_error(policy_dir):
    from tests.fitting import fit_rows

    module, task, rl = _module(policy_dir, {1, 2, 3}, max_skipped=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            CreditBenchError,
            match=r"3 updates skipped for a non-finite loss or gradient .*"
            r"more than rl.max_skipped_updates=2",
        ):
            fit_rows(module, task, rl, 4)
