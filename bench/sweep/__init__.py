"""Sweeps: a spec expanded into runs, learning-rate tuning, seeds in rounds, and the engines that
run them (a local worker pool, Ray, SLURM, a shared MLflow server). A sweep imports a run, never the
reverse."""
