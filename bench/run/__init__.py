"""Running experiments: one run, sweeps, evaluation, the warm start, MLflow tracking, plans."""
