"""Fit an RLVRModule for a few steps with Lightning on CPU and return its logged training rows."""

from bench.config import EvalConfig


def fit_rows(module, task, rl, steps):
    from bench.engine.fit import fit_logged

    return [r for r in fit_logged(module, task, rl, EvalConfig(num_problems=4), steps) if "loss/total" in r]
