"""A short real run (a random tiny policy on a task that says where answers go wrong): every eval
point keeps each problem's correct count in the result JSON and as an MLflow artifact, and the blame
alignment is logged at every eval point, the base policy's in the result."""

import json
from pathlib import Path

import pytest

from bench.config import (
    EvalConfig,
    MethodSpec,
    ModelConfig,
    RLConfig,
    RunConfig,
    SamplingConfig,
    TaskSpec,
    TrackingConfig,
)
from bench.run.result import RunResult
from bench.run.train import run
from bench.sweep.sweep import result_writer
from tests.engine.test_blame import NoCapitals  # noqa: F401  (registers the task "no-capitals")

pytestmark = pytest.mark.slow  # a real run: about a minute on two busy cores


@pytest.fixture(scope="module")
def finished(policy_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("per-problem")
    cfg = RunConfig(
        model=ModelConfig(name=str(policy_dir)),
        task=TaskSpec(name="no-capitals", options={"train_size": 500}),
        method=MethodSpec(options={"kl_coef": 0.0}),
        rl=RLConfig(steps=2, prompts_per_step=4, group_size=8, lr=1e-3, sampling=SamplingConfig(max_new_tokens=8)),
        eval=EvalConfig(every=1, n=3, k=[1], num_problems=5),
        tracking=TrackingConfig(
            uri=f"sqlite:///{root / 'mlflow.db'}", cache_dir=str(root / "cache"), sweep="pp", results_dir=str(root)
        ),
    )
    result = run(cfg, progress=False, on_result=result_writer(cfg))
    return result, cfg, RunResult.load(root / "pp" / "runs" / f"{result['run_name']}.json")


def test_every_eval_point_keeps_per_problem_counts(finished):
    _, _, r = finished
    assert r.eval_n == 3 and len(r.problem_ids["no-capitals"]) == 5
    assert [p.step for p in r.history] == [0, 1, 2]
    for p in r.history:
        counts = p.per_problem["no-capitals"]
        assert len(counts) == 5 and all(isinstance(c, int) and 0 <= c <= 3 for c in counts)
        assert sum(counts) / 15 == pytest.approx(p.eval["no-capitals"]["pass_at_1"])


def test_blame_alignment_is_measured_at_every_eval_point(finished):
    result, cfg, r = finished
    assert r.blame == r.history[0].blame and r.blame["n"] > 0
    assert all(0 < p.blame["share"] <= 1 and 0 <= p.blame["rank_frac"] <= 1 for p in r.history)
    assert isinstance(r.credit_probe["blame"], int)
    import mlflow

    client = mlflow.MlflowClient(cfg.tracking.uri)
    run_id = result["mlflow_run_id"]
    for key in ("blame/share", "blame/rank_frac", "blame/top1", "blame/uniform_share", "blame/n"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == [0, 1, 2], key
    cost = [m.value for m in client.get_metric_history(run_id, "time/blame_s")]
    print(f"blame alignment: {r.blame['n']:.0f} failed rows, {max(cost):.2f} s per eval point at most")
    files = {Path(a.path).name for a in client.list_artifacts(run_id, "per_problem")}
    assert files == {"step_000000.json", "step_000001.json", "step_000002.json"}
    table = json.loads(Path(client.download_artifacts(run_id, "per_problem/step_000002.json")).read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert [x["id"] for x in rows] == r.problem_ids["no-capitals"]
    assert [x["correct"] for x in rows] == r.history[-1].per_problem["no-capitals"]
    assert {x["n"] for x in rows} == {3} and {x["task"] for x in rows} == {"no-capitals"}
