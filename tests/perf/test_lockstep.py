"""bench/perf/lockstep_passes.py: K=2 tiny policies run batched (stacked parameters, one pass) and vmapped
compute what the two models compute separately (logits, log-probs, gradients), the stacked decoder is the
model's own forward, and its KV cache gives what a whole forward gives; bench/perf/lockstep.py: its
committed report is rebuilt from its json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bench.models.policy import build_tiny
from bench.perf import lockstep
from bench.perf.lockstep_passes import PHASES, Batched, Shapes, make_batch, policies_for, run

ROOT = Path(__file__).resolve().parents[2]
SHAPES = Shapes(decode_rows=3, train_rows=2, score_rows=3, prompt=5, new=4)


@pytest.fixture(scope="module")
def models():
    return [build_tiny("tiny-500k", seed=s)[0] for s in range(2)]


@pytest.mark.parametrize("phase", PHASES)
def test_stacked_passes_compute_the_separate_ones(models, phase):
    """Each mode's outputs and gradients against the separate models', seed by seed; the two seeds'
    outputs differ, so a stack that ran one seed's parameters for both would fail."""
    batch = make_batch(phase, 2, SHAPES.rows(phase), SHAPES, models[0].config.vocab_size)
    separate = run(phase, policies_for("separate", models), batch)
    assert not torch.allclose(separate.out[0], separate.out[1])
    modes = ["batched"] if phase == "decode" else ["batched", "vmap"]  # vmap keeps no KV cache
    for mode in modes:
        stacked = run(phase, policies_for(mode, models), batch)
        assert stacked.out.shape == separate.out.shape
        torch.testing.assert_close(stacked.out, separate.out, rtol=1e-4, atol=1e-5)
        assert (
            len(stacked.grads) == len(separate.grads) == (len(list(models[0].parameters())) if phase == "train" else 0)
        )
        for a, b in zip(stacked.grads, separate.grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_stacked_decoder_is_the_models_own_forward(models):
    """Batched logits against each model called as a transformers module (no lean_forward in between)."""
    ids = make_batch("score", 2, 3, SHAPES, models[0].config.vocab_size).ids  # [2, 3, 9]
    with torch.no_grad():
        stacked = Batched(models).logits(ids, None, ids.shape[2])
        for k, model in enumerate(models):
            torch.testing.assert_close(stacked[k], model(input_ids=ids[k]).logits, rtol=1e-4, atol=1e-5)


def test_decode_steps_give_the_logits_of_one_whole_forward(models):
    """The prefill and the cached decode steps of the batched pass: the logits a whole forward over the
    prompt and the fed tokens gives at the same positions (the last prompt position and each fed token's)."""
    batch = make_batch("decode", 2, 3, SHAPES, models[0].config.vocab_size)
    stepped = run("decode", [Batched(models)], batch).out  # [2, 3, new + 1, V]
    whole = torch.cat([batch.ids, batch.tokens], dim=2)
    with torch.no_grad():
        full = Batched(models).logits(whole, None, SHAPES.new + 1)
    torch.testing.assert_close(stepped, full, rtol=1e-4, atol=1e-5)


def test_the_committed_report_is_rebuilt_from_its_json():
    data = json.loads((ROOT / "results" / "benchmarks" / "lockstep.json").read_text())
    assert lockstep.notes(data) == data["notes"]
    assert lockstep.markdown(data) + "\n" == (ROOT / "results" / "benchmarks" / "lockstep.md").read_text()
