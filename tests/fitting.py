"""Fit an RLVRModule for a few steps with Lightning on CPU and return its logged training rows."""

from bench.config import EvalConfig


def fit_rows(module, task, rl, steps):
    import lightning as L

    from bench.engine.data import PromptDataModule
    from bench.perf.step import MemoryLogger

    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=steps * rl.ppo_epochs * rl.minibatches,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, EvalConfig(num_problems=4), 0))
    return [r for r in logger.rows if "loss/total" in r]
