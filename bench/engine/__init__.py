"""The training engine: the LightningModule (module) and what it calls -- the prompt order (data),
rollouts (sampling; engines in rollout, vllm_engine), scoring and the update (step), eval numbers
(metrics), the credit map and diagnostics -- plus policy loading, checkpoints, and the parity runs
that check the update in several processes against one (parity)."""
