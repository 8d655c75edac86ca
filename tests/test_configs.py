"""Every shipped config builds short of its weights, and the Hub architectures are the real ones.

For each sweep spec and run config the repository ships, every distinct (method, model) run goes
through bench.run.plan.memory_plan: the method and tasks resolve, the tasks' data files load, the policy is
built on the meta device with the Hub model's architecture, LoRA and activation checkpointing
applied, the LightningModule, data module and Lightning strategy constructed. The paper configs
must also fit their GPUs (80 GB) with the activations of the micro-batch they state.
"""

from pathlib import Path

import pytest

from bench.errors import CreditBenchError
from bench.models.hub_archs import (
    ARCHITECTURES,
    architecture,
    meta_model,
    published_params,
    random_checkpoint,
)
from tests.shared_data import DATA, needs_data

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "results").glob("papers/*.sweep.yaml")) + sorted((REPO / "results" / "sweeps").glob("*.yaml"))
RUN_CONFIGS = sorted((REPO / "results" / "configs").glob("*.yaml"))
GPU_GB = 80.0


@pytest.fixture(autouse=True)
def _local_data(monkeypatch):
    monkeypatch.setenv("CREDITBENCH_DATA", str(DATA))


@needs_data
@pytest.mark.parametrize("path", SPECS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_sweep_builds_short_of_its_weights(path):
    from bench.run.plan import memory_plan
    from bench.sweep.sweep import load_spec

    sweep = load_spec(path)
    seen, loaded = set(), set()
    for run in sweep.runs:
        if (run.label, run.cfg.model.name) in seen:  # seeds change nothing memory_plan() builds
            continue
        seen.add((run.label, run.cfg.model.name))
        tasks = repr((run.cfg.task, run.cfg.eval.tasks))  # each distinct task set's data is read once
        p = memory_plan(run.cfg, GPU_GB, load_data=tasks not in loaded)
        loaded.add(tasks)
        assert p.params > 0 and 0 < p.trainable <= p.params
        if run.cfg.model.lora.rank:
            assert p.trainable < p.params
        if path.parent.name == "papers" and not run.cfg.model.name.startswith("tiny-"):  # not an analogue
            if run.cfg.model.lora.rank:  # ARCA's rank 64 on attention and MLP: 4% of Qwen3-1.7B
                assert p.trainable < 0.05 * p.params
            # with the activations of one micro-batch of the update, which each spec states
            assert p.total_gb < 0.9 * GPU_GB and p.activations_gb > 0, f"{run.key}: {p.line()}"
            assert run.cfg.rl.micro_batch_tokens > 0, f"{run.key}: no rl.micro_batch_tokens"
            expected = published_params(run.cfg.model.name)
            assert expected is not None, f"{run.cfg.model.name} has no architecture in bench.models.hub_archs"
            assert p.params == pytest.approx(expected * 1e9, rel=0.015)


@needs_data
@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_run_config_builds(path):
    import yaml

    from bench.run.args import run_config
    from bench.run.plan import memory_plan

    cfg = run_config(yaml.safe_load(path.read_text()), str(path))
    assert memory_plan(cfg).params > 0


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_hub_architectures_match_their_model_cards(name):
    """The written-down config.json fields reproduce each model card's parameter count."""
    model = meta_model(name)
    n = sum(p.numel() for p in model.parameters())
    assert n == pytest.approx(published_params(name) * 1e9, rel=0.015)  # cards round (Qwen3-1.7B has 1.72B)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model.config.tie_word_embeddings == ARCHITECTURES[name][0]["tie_word_embeddings"]


def test_paper_sweep_model_overrides_reach_their_runs_only():
    from bench.sweep.sweep import load_spec

    sweep = load_spec(REPO / "results" / "papers" / "selective_traces.sweep.yaml")
    by_model = {r.cfg.model.name: r.cfg for r in sweep.runs}
    assert by_model["Qwen/Qwen3-8B"].trainer.strategy == "fsdp" and by_model["Qwen/Qwen3-8B"].trainer.devices == 8
    assert by_model["Qwen/Qwen3-8B"].rollout.engine == "hf"
    assert (
        by_model["Qwen/Qwen3-1.7B"].trainer.strategy == "auto" and by_model["Qwen/Qwen3-1.7B"].rollout.engine == "vllm"
    )
    assert all(c.model.gradient_checkpointing for c in by_model.values())


def test_fsdp_strategy_shards_each_decoder_layer():
    """trainer.strategy fsdp: FSDP2 through Lightning's ModelParallelStrategy over every process, the
    module sharding each decoder layer (the plan), the checkpoint one file."""
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    from bench.config import RunConfig
    from bench.run.strategy import make_strategy, shard_plan

    cfg = RunConfig()
    cfg.model.name, cfg.precision = "Qwen/Qwen3-8B", "bf16-mixed"
    cfg.trainer.strategy, cfg.trainer.devices = "fsdp", 8
    s = make_strategy(cfg)
    assert isinstance(s, ModelParallelStrategy) and not s._save_distributed_checkpoint
    assert (s._data_parallel_size, s._tensor_parallel_size) == (8, 1)
    plan = shard_plan(cfg)
    assert plan.layers == (Qwen3DecoderLayer,) and plan.reshard_after_forward and not plan.hybrid
    assert plan.param_dtype == torch.bfloat16
    cfg.trainer.fsdp_sharding, cfg.trainer.devices, cfg.trainer.num_nodes = "HYBRID_SHARD", 4, 2
    s, plan = make_strategy(cfg), shard_plan(cfg)
    assert (s._data_parallel_size, s._tensor_parallel_size) == (2, 4) and plan.hybrid  # nodes x devices
    cfg.trainer.strategy = "ddp"
    assert shard_plan(cfg) is None


def test_unknown_architecture_names_the_known_ones():
    with pytest.raises(CreditBenchError, match="no architecture known for 'nobody/none'.*Qwen/Qwen3-1.7B"):
        architecture("nobody/none")


def test_random_checkpoint_loads_through_from_pretrained_and_generates(tmp_path):
    """A cut-down copy of the Qwen3-1.7B architecture (full vocabulary, 1 layer) saved at random init
    loads with the ordinary loading path and samples decodable text: what a GPU throughput run uses."""
    from bench.config import SamplingConfig
    from bench.engine.rollout import HFRolloutEngine
    from bench.models.policy import load_policy

    random_checkpoint(
        "Qwen/Qwen3-1.7B",
        tmp_path,
        dtype="float32",
        num_hidden_layers=1,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )
    model, tok = load_policy(tmp_path)
    assert model.config.vocab_size == 151936 == len(tok)
    gen = HFRolloutEngine(model, tok).generate(["1+1="], 2, SamplingConfig(max_new_tokens=8))
    assert gen.completion_ids.shape == (2, 8) and len(gen.texts) == 2
    assert int(gen.completion_ids.max()) < 151936


def test_bench_scale_runs_real_steps_on_a_cut_down_architecture(tmp_path):
    """The GPU throughput script's whole path (random checkpoint, one process per engine, real
    `creditbench train` steps, MLflow read-back, the table) on CPU with a cut-down Qwen3-1.7B."""
    import json
    import subprocess
    import sys

    out = tmp_path / "scale.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.perf.scale",
            "--engines",
            "hf",
            "--steps",
            "2",
            "--prompts",
            "2",
            "--group-size",
            "2",
            "--new-tokens",
            "8",
            "--minibatches",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--shrink",
            "num_hidden_layers=1",
            "hidden_size=64",
            "intermediate_size=128",
            "num_attention_heads=2",
            "num_key_value_heads=1",
            "head_dim=32",
            "vocab_size=512",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [r["engine"] for r in rows] == ["hf"]
    assert 0 < rows[0]["gen_tokens_per_step"] <= 2 * 2 * 8
    assert rows[0]["rollout_tok_s"] > 0 and rows[0]["update_tok_s"] > 0
    assert "| hf |" in out.read_text()


def test_activation_estimate_bounds_what_the_training_forward_keeps():
    """bench.run.plan.activation_gb against the bytes the training forward really saves for its
    backward (every tensor autograd keeps, parameters excluded), with and without activation
    checkpointing: never below, and within 3x (the estimate adds the backward's transient peak, which
    no saved tensor shows: the logits' gradient and, with checkpointing, one recomputed layer); and
    with the LM head in chunks, which keeps no logits at all (the estimate: one chunk's)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from bench.engine.scoring import score
    from bench.models.policy import enable_gradient_checkpointing
    from bench.run.plan import activation_gb

    cfg = Qwen3Config(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=8000,
    )
    B, P, T = 4, 32, 96
    for checkpointing, chunks in ((False, 0), (True, 0), (False, 2**16)):
        model = Qwen3ForCausalLM(cfg)
        if checkpointing:
            enable_gradient_checkpointing(model)
        model.train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}

        def pack(t, params=params, saved=saved):
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        ids = torch.randint(0, cfg.vocab_size, (B, P + T))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            score(model, ids[:, :P], torch.ones(B, P), ids[:, P:], torch.ones(B, T), 1.0, False, chunk_elements=chunks)
        measured = sum(saved.values()) / 1e9
        estimate = activation_gb(cfg, B * (P + T), B * T, 4, checkpointing, chunks)
        assert measured <= estimate <= 3 * measured, (checkpointing, chunks, measured, estimate)
        if chunks:
            assert estimate < 0.75 * activation_gb(cfg, B * (P + T), B * T, 4, checkpointing)  # no logits kept
