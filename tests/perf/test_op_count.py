"""The op-count benchmark (bench/perf/op_count.py, its runs in bench/perf/op_count_runs.py): the counter puts
each op of a measured step in its phase and part (a part's backward with it, by the autograd nodes its
forward made), and a run of each framework counts every phase of its steps."""

import importlib.util

import pytest
import torch

from bench.perf import op_count
from bench.perf.op_count_runs import PARTS, PHASES, SYNCS, OpCounter


def test_the_counter_puts_each_op_of_a_step_in_its_phase_and_part():
    c = OpCounter()
    x = torch.randn(3, requires_grad=True)
    with c:
        x.exp()  # before any step: not counted
        c.begin_step()
        with c.within(c.phases, "rollout"):
            y = x.exp()
        with c.within(c.phases, "loss + backward"):
            with c.within(c.parts, PARTS[2]):
                z = y.view(3)
            c.nodes[y.grad_fn] = PARTS[0]  # the backward of y's op is counted with the part
            (z * 2).sum().backward()
            float(z.detach().sum())
        c.end_step()
        x.exp()  # after the step: not counted
    step = c.steps[0]
    assert step["rollout", "", "exp", False] == 1
    assert step["loss + backward", PARTS[2], "view", True] == 1
    assert step["loss + backward", PARTS[0], "mul", False] == 1  # exp's backward: grad * exp(x)
    assert step["loss + backward", "", "_local_scalar_dense", False] == 1
    assert "_local_scalar_dense" in SYNCS
    assert {phase for phase, *_ in step} <= set(PHASES)
    assert len(c.steps) == 1 and c.phases == [] and c.nodes == {}


def test_summary_counts_launches_and_syncs_by_phase():
    run = {
        "ops": {"rollout": {"mm": 3, "view": 2, "_local_scalar_dense": 1}, "other": {"add": 1}},
        "views": {"rollout": 2},
    }
    s = op_count.summary(run)
    assert s["rollout"] == {"ops": 6, "launches": 4, "syncs": 1}
    assert s["score"] == {"ops": 0, "launches": 0, "syncs": 0}
    assert s["step"] == {"ops": 7, "launches": 5, "syncs": 1}


def _check(run: dict, framework: str) -> None:
    assert len(run["step_ops"]) == 1 and run["step_ops"][0] == pytest.approx(op_count.summary(run)["step"]["ops"])
    s = op_count.summary(run)
    assert s["rollout"]["ops"] > s["loss + backward"]["ops"] > s["optimizer"]["ops"] > 0
    assert s["step"]["launches"] < s["step"]["ops"]
    assert all(16 <= n <= 16 * 32 for n in run["step_tokens"])  # 2 prompts x G=8, 1..32 tokens each
    parts = run["parts"]
    if framework == "creditbench":
        assert parts[PARTS[0]]["ops"] > 0 and parts[PARTS[2]]["ops"] > 0  # the shared prefix, the diagnostics
    else:
        assert all(not p for p in parts.values())


@pytest.mark.parametrize("framework", ["creditbench", "trl"])
def test_a_run_counts_every_phase_of_its_step(policy_dir, framework):
    if framework == "trl" and importlib.util.find_spec("trl") is None:
        pytest.skip("trl is not installed (the trl extra: pip install -e '.[trl]')")
    spec = {"framework": framework, "model_dir": str(policy_dir), "steps": 1, "warmup": 1, "prompts": 2}
    _check(op_count.run_isolated({**spec, "threads": 1}), framework)
