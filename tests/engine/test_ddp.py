"""Training in several processes: DDP on CPU (two processes on gloo, started by Lightning's own
launcher through ``python -m bench.engine.parity``) against one process on the same global batch; the
Lightning strategies make_strategy builds; activation checkpointing and bf16-mixed on CPU.

The gradient test is the acceptance criterion of multi-process training: the two processes hold
unequal shares of the groups (8 short and 12 long completions: 31 and 122 tokens), so normalising
by a process's own counts instead of the global batch's would move the gradient by 7e-3 to 0.25;
with the global counts the all-reduced gradient equals the single-process one to float precision.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PARITY = [sys.executable, "-m", "bench.engine.parity"]  # the 2-process command (bench/engine/parity)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    """Run ``args`` (a command that starts a 2-process Lightning DDP run) with a free MASTER_PORT."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "PYTHONPATH": str(REPO)}
    for key in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "PL_GLOBAL_SEED"):
        env.pop(key, None)  # a clean launch: rank 0 starts the others
    out = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.fixture
def one_thread():
    """The workers compute on one thread each; so does the in-process reference."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_ddp_update_matches_one_process_on_the_same_global_batch(tmp_path, one_thread):
    """For each aggregation (GRPO's seq-mean-token-mean with a KL term, DAPO's token-mean, Dr. GRPO's
    seq-mean-token-sum-norm) and the 80/20 rule's batch-wide entropy quantile and kept-token count:
    the loss (mean over processes of each one's W x part) and the gradient DDP leaves on the
    parameters (after its all-reduce) equal one process's on the whole batch; so do they when each
    process accumulates its share over micro-batches under a token budget."""
    from bench.engine.parity.batch import CASES, global_batch, shares
    from bench.engine.parity.update import update_case
    from bench.models.policy import build_tiny, char_tokenizer

    parts = shares(global_batch(char_tokenizer()), devices=2)
    tokens, rows = [int(s.completion_mask.sum()) for s in parts], [s.size for s in parts]
    assert tokens[0] != tokens[1] and rows[0] != rows[1], "unequal shares: the global counts must matter"

    out = tmp_path / "ddp.pt"
    _launch([*PARITY, "update", str(out), "--strategy", "ddp", "--devices", "2"])
    ddp = torch.load(out)

    n_params = len(list(build_tiny("tiny-500k")[0].parameters()))
    for case in CASES:
        one, two = update_case(case, devices=1), ddp[case]
        assert one["grads"].keys() == two["grads"].keys() and len(one["grads"]) == n_params
        diff = max(float((one["grads"][k] - two["grads"][k]).abs().max()) for k in one["grads"])
        scale = max(float(g.abs().max()) for g in one["grads"].values())
        assert diff < 1e-6 and scale > 1e-2, f"{case}: max |grad difference| {diff:.2e} (largest grad {scale:.2e})"
        assert two["stats"]["loss/total"] == pytest.approx(one["stats"]["loss/total"], abs=1e-6), case

    # gradient accumulation under DDP: each process's share in micro-batches (3 on one, 6 on the
    # other), the all-reduce held back until each one's last, equals one unsplit process
    for case in CASES:
        one, two = update_case(case, devices=1, micro_batch_tokens=10_000), ddp[f"{case}@split"]
        diff = max(float((one["grads"][k] - two["grads"][k]).abs().max()) for k in one["grads"])
        scale = max(float(g.abs().max()) for g in one["grads"].values())
        assert diff < 1e-6 and scale > 1e-2, f"{case} split: max |grad difference| {diff:.2e} (largest {scale:.2e})"
        assert two["stats"]["loss/total"] == pytest.approx(one["stats"]["loss/total"], abs=1e-6), case
        assert two["stats"]["train/grad_norm"] == pytest.approx(one["stats"]["train/grad_norm"], rel=1e-5), case
        if "loss/kl" in one["stats"]:
            assert one["stats"]["loss/kl"] > 0


def test_ddp_training_keeps_the_processes_in_step(tmp_path, one_thread):
    """A real 2-process run (rollouts, 2 PPO epochs x 2 minibatches: 4 all-reduced backward passes
    per step, a 32-sample budget): each step's prompts are the single-process run's, split between
    the processes; their sampling seeds differ; the budget, counted over both, stops both after 2
    of 4 steps; the weights stay identical; the greedy step-0 eval, split 3 + 4 problems and
    gathered, equals the single-process eval problem by problem."""
    from bench.engine.parity.train import train_ddp

    out = tmp_path / "train.pt"
    _launch([*PARITY, "train", str(out), "--strategy", "ddp", "--devices", "2"])
    ranks = torch.load(out)
    train_ddp(tmp_path / "one.pt", devices=1)
    (one,) = torch.load(tmp_path / "one.pt")

    assert [r["rl_step"] for r in ranks] == [2, 2] and one["rl_step"] == 2
    assert [r["global_step"] for r in ranks] == [8, 8]
    assert [r["samples"] for r in ranks] == [32, 32]
    assert ranks[0]["tokens"] == ranks[1]["tokens"] > 0
    assert [r["seed"] for r in ranks] == [0, 1]
    for step, prompts in enumerate(one["prompts"]):
        assert ranks[0]["prompts"][step] + ranks[1]["prompts"][step] == prompts
    assert torch.equal(ranks[0]["weights"], ranks[1]["weights"])
    assert not torch.equal(ranks[0]["weights"], one["weights"])  # they moved (and sampled differently)
    base_one, base_two = one["eval"][0]["eval"]["arithmetic"], ranks[0]["eval"][0]["eval"]["arithmetic"]
    assert base_two["num_problems"] == 7
    assert base_two["per_problem_pass_at_1"] == base_one["per_problem_pass_at_1"]
    assert 0 < base_two["pass_at_1"] < 1 and base_two["pass_at_1"] == base_one["pass_at_1"]
    assert ranks[1]["eval"][0]["eval"]["arithmetic"]["per_problem_pass_at_1"] == base_two["per_problem_pass_at_1"]
    # J's terms (bench.engine.exact), one a problem, gathered to both processes (their values are 0.0
    # here: the scaled random policy gives the 30-token scratchpads p < 1e-45, below float32)
    assert [len(r["eval"][0]["eval"]["arithmetic"]["per_problem_ref_prob"]) for r in ranks] == [7, 7]


@pytest.mark.slow  # about 40 s on 2 idle cores (two processes import torch, Lightning, transformers, MLflow)
def test_cli_train_with_ddp_logs_one_mlflow_run(tmp_path, policy_dir):
    """`creditbench train` with trainer.strategy ddp on 2 CPU processes: one MLflow run (rank 0's),
    each metric logged once per step, global sample counts, sane eval numbers, one result file."""
    import mlflow
    import yaml

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = {
        "model": {"name": str(policy_dir)},
        "task": {"name": "arithmetic", "options": {"train_size": 64, "eval_size": 16}},
        "method": {"name": "grpo", "options": {"kl_coef": 0.04}},
        "rl": {"steps": 2, "prompts_per_step": 4, "group_size": 4, "minibatches": 2, "sampling": {"max_new_tokens": 8}},
        "eval": {
            "every": 2,
            "n": 2,
            "k": [1, 2],
            "num_problems": 6,
            "batch_problems": 3,
            "sampling": {"max_new_tokens": 8},
        },
        "tracking": {"uri": uri, "experiment": "ddp", "sweep": "ddp", "results_dir": str(tmp_path / "results")},
        "trainer": {"accelerator": "cpu", "devices": 2, "strategy": "ddp"},
        "checkpoint": {"every": 1, "dir": str(tmp_path / "ckpt"), "keep": True},  # every process's RNG state
        "threads": 1,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    out = _launch([sys.executable, "-m", "bench.cli", "train", "--config", str(path), "--no-progress"])
    assert out.stdout.count("eval pass@1") == 1, out.stdout

    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("ddp").experiment_id])
    assert run.info.status == "FINISHED"
    rid = run.info.run_id
    assert [m.step for m in client.get_metric_history(rid, "train/reward")] == [1, 2]
    assert [m.value for m in client.get_metric_history(rid, "train/samples")] == [16, 32]  # both processes' rollouts
    assert [m.value for m in client.get_metric_history(rid, "train/batch_size")] == [16, 16]
    history = client.get_metric_history(rid, "eval/arithmetic/num_problems")
    assert [(m.step, m.value) for m in history] == [(0, 6), (2, 6)]
    for key in ("pass_at_1", "pass_at_2"):
        assert all(0 <= m.value <= 1 for m in client.get_metric_history(rid, f"eval/arithmetic/{key}"))
    assert all(0 < m.value <= 8 for m in client.get_metric_history(rid, "eval/arithmetic/mean_length"))
    assert len(client.list_artifacts(rid, "completions")) == 2
    (result,) = (tmp_path / "results" / "ddp" / "runs").glob("*.json")
    summary = json.loads(result.read_text())
    assert summary["mlflow_run_id"] == rid and summary["samples"] == 32 and summary["steps"] == 2
    assert summary["final"]["num_problems"] == 6 and len(summary["history"]) == 2
    import torch

    (ckpt,) = (tmp_path / "ckpt").glob("*/last.ckpt")
    state = torch.load(ckpt, weights_only=False)["creditbench"]
    assert state["rl_step"] == 2 and len(state["rng"]) == 2  # one RNG state per process
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])


def test_ddp_strategy_uses_gloo_on_cpu():
    from lightning.pytorch.strategies import DDPStrategy

    from bench.config import RunConfig
    from bench.run.strategy import make_strategy

    cfg = RunConfig()
    cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.strategy = "cpu", 2, "ddp"
    s = make_strategy(cfg)
    assert isinstance(s, DDPStrategy) and s._process_group_backend == "gloo"
    cfg.trainer.strategy = "auto"
    cfg.trainer.devices = 1
    assert make_strategy(cfg) == "auto"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"strategy": "fsdp", "accelerator": "cpu", "devices": 1}, r"trainer.strategy fsdp needs trainer.devices x"),
        ({"strategy": "auto", "devices": 2}, "needs trainer.strategy ddp or fsdp"),
        ({"strategy": "ddp", "devices": 3}, r"rl.prompts_per_step \(16\) must be divisible by the number of processes"),
    ],
)
def test_impossible_multi_process_configs_are_refused_in_one_line(change, message):
    from bench.config import RunConfig
    from bench.errors import CreditBenchError
    from bench.run.resolve import resolve

    cfg = RunConfig()
    for k, v in change.items():
        setattr(cfg.trainer, k, v)
    with pytest.raises(CreditBenchError, match=message) as e:
        resolve(cfg)
    assert "\n" not in str(e.value)


def test_too_few_eval_problems_for_the_processes_is_refused():
    from bench.config import RunConfig
    from bench.errors import CreditBenchError
    from bench.run.resolve import resolve

    cfg = RunConfig()
    cfg.trainer.strategy, cfg.trainer.devices, cfg.eval.num_problems = "ddp", 4, 3
    with pytest.raises(CreditBenchError, match=r"eval.num_problems \(3\) must be at least the number of processes"):
        resolve(cfg)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    """model.gradient_checkpointing recomputes each decoder layer in the backward pass (each layer's
    forward runs twice) and changes nothing else: in fp32 the loss and every gradient are equal."""
    from bench.models.policy import build_tiny, enable_gradient_checkpointing

    plain, _ = build_tiny("tiny-500k", seed=0)
    checkpointed, _ = build_tiny("tiny-500k", seed=0)
    enable_gradient_checkpointing(checkpointed)
    mlp, calls = checkpointed.model.layers[0].mlp, []
    forward = mlp.forward

    def counted(*args, **kwargs):  # (the recomputation runs without the module's hooks)
        calls.append(1)
        return forward(*args, **kwargs)

    mlp.forward = counted
    from bench.engine.parity.update import update_case

    a, b = update_case("dapo", 1, plain), update_case("dapo", 1, checkpointed)
    assert len(calls) == 2, "one forward and one recomputation in the backward pass"
    assert b["stats"]["loss/total"] == pytest.approx(a["stats"]["loss/total"], abs=1e-7)
    assert a["grads"].keys() == b["grads"].keys()
    assert max(float((a["grads"][k] - b["grads"][k]).abs().max()) for k in a["grads"]) < 1e-7


def test_bf16_mixed_trains_on_cpu_with_a_finite_loss(policy_dir):
    """precision bf16-mixed (autocast to bfloat16 on CPU, fp32 weights): a real step of rollouts and
    update has a finite loss and gradient norm, and the fp32 weights move."""
    import lightning as L

    from bench.config import EvalConfig, RLConfig, SamplingConfig
    from bench.engine.data import PromptDataModule
    from bench.engine.fit import MemoryLogger
    from bench.engine.module import RLVRModule
    from bench.engine.parity.train import GRPO, EveryTokenUp
    from bench.models.policy import load_policy
    from bench.registry import TASKS

    model, tok = load_policy(policy_dir)
    before = [p.detach().clone() for p in model.parameters()]
    task = TASKS.get("arithmetic")(TASKS.get("arithmetic").Config(train_size=64))
    rl = RLConfig(steps=1, prompts_per_step=2, group_size=4, lr=1e-3, sampling=SamplingConfig(max_new_tokens=8))
    ev = EvalConfig(num_problems=4)
    module = RLVRModule(model, tok, EveryTokenUp(GRPO.Config(kl_coef=0.0)), task, "arithmetic", rl, ev)
    logger = MemoryLogger()
    trainer = L.Trainer(
        accelerator="cpu",
        precision="bf16-mixed",
        max_steps=1,
        logger=logger,
        limit_val_batches=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=PromptDataModule(task, rl.prompts_per_step, ev, 0))
    (row,) = [r for r in logger.rows if "loss/total" in r]
    assert torch.isfinite(torch.tensor([row["loss/total"], row["train/grad_norm"]])).all()
    assert row["train/grad_norm"] > 0
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
