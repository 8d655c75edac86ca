"""The training engine: the LightningModule, rollout engines, policy loading, checkpoints, metrics."""
