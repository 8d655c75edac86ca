"""Training under FSDP2 (trainer.strategy fsdp: fully_shard per decoder layer through Lightning's
ModelParallelStrategy) in two CPU processes on gloo, started by Lightning's launcher through
``python -m bench.engine.parity --strategy fsdp``, against one process on the same global batch.

The processes hold unequal shares of the groups (8 short and 12 long completions) and, under a token
budget, split them into different numbers of micro-batches (3 and 6): the gradient each process keeps
a shard of, gathered whole, must equal the single-process gradient to float precision.
"""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
PARITY = [sys.executable, "-m", "bench.engine.parity"]  # the 2-process command (bench/engine/parity)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ddp_test = _load("test_ddp_helpers", REPO / "tests" / "engine" / "test_ddp.py")
_launch, one_thread = _ddp_test._launch, _ddp_test.one_thread  # a 2-process launch; the 1-thread fixture


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_fsdp_update_matches_one_process_on_the_same_global_batch(tmp_path, one_thread):
    """GRPO with the KL term to a sharded reference copy, the 80/20 rule's batch-wide entropy quantile,
    and LoRA (GRPO with the KL term to the adapter-off pass; frozen and trainable weights in one FSDP
    unit): the loss and the whole gradient (every shard gathered) equal one process's on the whole
    batch, fused and with each process accumulating its share over a different number of
    micro-batches. (Every aggregation: python -m bench.perf.fsdp, results/benchmarks/fsdp.md.)"""
    from bench.engine.parity.batch import LORA_CASE
    from bench.engine.parity.update import update_case

    out = tmp_path / "fsdp.pt"
    cases = ["grpo", "entropy_top", LORA_CASE]
    _launch([*PARITY, "update", str(out), "--strategy", "fsdp", "--cases", *cases])
    fsdp = torch.load(out)

    diffs = {}
    for case in cases:
        for split, budget in (("", 0), ("@split", 10_000)):
            one, two = update_case(case, 1, micro_batch_tokens=budget), fsdp[case + split]
            if case == LORA_CASE:  # the adapter alone trains
                assert all("lora_" in k for k in two["grads"]) and len(two["grads"]) > 0
            diffs[case + split] = diff = _max_diff(one["grads"], two["grads"])
            scale = max(float(g.abs().max()) for g in one["grads"].values())
            assert diff < 1e-6 and scale > 1e-3, (
                f"{case}{split}: max |grad difference| {diff:.2e} (largest {scale:.2e})"
            )
            assert two["stats"]["loss/total"] == pytest.approx(one["stats"]["loss/total"], abs=1e-6), case + split
            assert two["stats"]["train/grad_norm"] == pytest.approx(one["stats"]["train/grad_norm"], rel=1e-5), case
    print("max |grad difference| FSDP (2 processes) vs one process:", {k: f"{v:.1e}" for k, v in diffs.items()})


@pytest.mark.slow  # about a minute on 2 idle cores: two short runs of 2 processes
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_short_fsdp_run_trains_and_saves_the_whole_policy(tmp_path, one_thread, lora):
    """3 RL steps of GRPO (KL to the reference: a sharded frozen copy, or the adapter-off pass under
    LoRA), 2 PPO epochs x 2 minibatches in micro-batches, in 2 FSDP processes that generate
    completions of different lengths: the trainable weights move, the frozen ones do not, the greedy
    eval (3 + 4 problems) and the credit map run, and the saved policy loads back with the trained
    weights."""
    from bench.models.policy import load_policy

    out = tmp_path / "train.pt"
    _launch([*PARITY, "train", str(out), "--strategy", "fsdp", *(["--lora"] if lora else [])], timeout=400)
    r = torch.load(out, weights_only=False)
    assert r["rl_step"] == 3 and r["samples"] == 48
    assert [e["step"] for e in r["eval"]] == [0, 3] and r["eval"][0]["eval"]["arithmetic"]["num_problems"] == 7
    probe = r["probe"]  # the credit map of a mixed group, computed on the whole policy by every process
    assert len(probe["credit"]) == len(probe["completion_tokens"]) > 0
    before, after, trainable = r["before"], r["after"], set(r["trainable"])
    assert before.keys() == after.keys()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    tied = {k for k in after if k.endswith("lm_head.weight")}  # the embedding's own tensor, tied
    assert moved - tied and moved - tied <= trainable, sorted(moved - tied - trainable)[:3]
    for k in tied:
        assert torch.equal(after[k], after[k.replace("lm_head", "model.embed_tokens")]), k
    if lora:
        assert all("lora_" in k for k in moved)
    state = load_policy(r["policy_dir"])[0].state_dict()
    if not lora:
        assert all(torch.equal(state[k], v) for k, v in after.items()), "the saved policy is the trained one"
    else:  # the adapter saved, merged on load: W + (alpha / r) B A, with the trained A and B
        merged = 0
        for key in after:
            if key.endswith(".lora_A.default.weight"):
                unit = key.removesuffix(".lora_A.default.weight")
                w = after[f"{unit}.base_layer.weight"] + 2.0 * after[f"{unit}.lora_B.default.weight"] @ after[key]
                saved = state[unit.removeprefix("base_model.model.") + ".weight"]
                assert torch.allclose(saved, w, atol=1e-6), unit
                merged += 1
        assert merged == 7 * 3  # every linear layer of the 3 decoder layers


@pytest.mark.slow  # about 2 minutes on 2 cores: a run, then its resume, each in 2 processes
def test_cli_train_with_fsdp_checkpoints_resumes_and_saves_the_policy(tmp_path, policy_dir):
    """`creditbench train` with trainer.strategy fsdp on 2 CPU processes, activation checkpointing and
    micro-batches: one finished MLflow run, a last.ckpt holding the trainable weights whole (gathered
    on the first process), the saved policy equal to them; and a run whose MLflow run is still open
    resumes from that checkpoint (the strategy loads it into the shards)."""
    import mlflow
    import yaml

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = {
        "model": {"name": str(policy_dir), "gradient_checkpointing": True},
        "task": {"name": "arithmetic", "options": {"train_size": 64, "eval_size": 16}},
        "method": {"name": "grpo", "options": {"kl_coef": 0.04}},
        "rl": {
            "steps": 2,
            "prompts_per_step": 4,
            "group_size": 4,
            "minibatches": 2,
            "micro_batch_tokens": 200,
            "sampling": {"max_new_tokens": 8},
        },
        "eval": {
            "every": 2,
            "n": 2,
            "k": [1, 2],
            "num_problems": 6,
            "batch_problems": 3,
            "sampling": {"max_new_tokens": 8},
        },
        "tracking": {"uri": uri, "experiment": "fsdp"},
        "trainer": {"accelerator": "cpu", "devices": 2, "strategy": "fsdp"},
        "checkpoint": {"every": 1, "dir": str(tmp_path / "ckpt"), "keep": True, "policy": True},
        "threads": 1,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "bench.cli", "train", "--config", str(path), "--no-progress"]
    out = _launch(command, timeout=400)
    assert out.stdout.count("eval pass@1") == 1, out.stdout

    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fsdp").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "train/samples")] == [16, 32]
    (ckpt,) = (tmp_path / "ckpt").glob("*/last.ckpt")
    state = torch.load(ckpt, weights_only=False)
    weights = state["state_dict"]
    assert len(weights) == 35 and not any(k.startswith("ref_policy.") for k in weights)  # the trainable ones
    from bench.models.policy import load_policy

    saved = load_policy(ckpt.parent / "policy")[0].state_dict()
    assert all(torch.equal(saved[k.removeprefix("policy.")], v) for k, v in weights.items())

    client.update_run(run.info.run_id, status="RUNNING")  # as if the run had been killed after its last checkpoint
    out = _launch(command[:-1], timeout=400)  # with progress: it says where it resumes from
    assert f"resuming run {run.info.run_name!r}" in out.stdout and str(ckpt) in out.stdout, out.stdout[-2000:]
    (again,) = client.search_runs([client.get_experiment_by_name("fsdp").experiment_id])
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"


def test_the_parity_runs_use_the_strategies_and_plan_a_run_builds():
    """bench.engine.parity builds its Lightning strategies and FSDP plan itself (the engine sits below
    bench.run): they are the ones make_strategy and shard_plan build from the same trainer settings,
    so what the parity tests show holds for a run."""
    from bench.config import RunConfig
    from bench.engine.parity import processes
    from bench.run.strategy import make_strategy, shard_plan

    cfg = RunConfig()
    cfg.model.name = "tiny-500k"
    cfg.trainer.accelerator, cfg.trainer.devices = "cpu", 2
    settings = (
        "_process_group_backend",
        "_data_parallel_size",
        "_tensor_parallel_size",
        "_save_distributed_checkpoint",
    )
    for name in processes.STRATEGIES:
        cfg.trainer.strategy = name
        ours, runs = processes.lightning_strategy(name, 2), make_strategy(cfg)
        assert isinstance(runs, type(ours)), name
        assert [getattr(ours, k, None) for k in settings] == [getattr(runs, k, None) for k in settings], name
        assert ours._process_group_backend == "gloo"
    assert processes.shard_plan() == shard_plan(cfg)  # cfg: fsdp
    cfg.trainer.strategy, cfg.trainer.devices = "auto", 1
    assert processes.lightning_strategy("ddp", 1) == make_strategy(cfg) == "auto"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["update", "x", "--strategy", "fsdp", "--devices", "1"], "fsdp runs in 2 processes, got --devices 1"),
        (["update", "x", "--devices", "3"], "update splits the batch between 1 or 2 processes, got --devices 3"),
        (["train", "x", "--lora"], "--lora is a train option of --strategy fsdp"),
        (["train", "x", "--cases", "grpo"], "--cases is an update option"),
    ],
)
def test_impossible_parity_commands_are_refused_in_one_line(args, message, capsys):
    from bench.engine.parity.__main__ import parse

    with pytest.raises(SystemExit) as exit_:
        parse(args)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and message in err, err


def test_fsdp_on_one_process_is_refused_in_one_line():
    from bench.config import RunConfig
    from bench.errors import CreditBenchError
    from bench.run.resolve import resolve

    cfg = RunConfig()
    cfg.trainer.accelerator, cfg.trainer.devices, cfg.trainer.strategy = "cpu", 1, "fsdp"
    with pytest.raises(
        CreditBenchError, match=r"trainer.strategy fsdp needs trainer.devices x trainer.num_nodes >= 2, got 1"
    ) as e:
        resolve(cfg)
    assert "\n" not in str(e.value)
    cfg.trainer.devices, cfg.trainer.fsdp_sharding = 2, "NO_SHARD"
    with pytest.raises(CreditBenchError, match="NO_SHARD shards nothing: use trainer.strategy ddp"):
        resolve(cfg)
