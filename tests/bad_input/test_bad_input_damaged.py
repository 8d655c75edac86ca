"""Damaged files a run reads: a saved policy's weights, a base checkpoint's weights and a run's
resume checkpoint, truncated or overwritten, are named in one line with what to do, not a traceback."""

from __future__ import annotations

import json

import pytest
import torch

from bench.config import RunConfig, TrackingConfig
from bench.errors import CreditBenchError


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from bench.models.policy import build_tiny, save_policy

    model, tokenizer = build_tiny("tiny-500k")
    out = tmp_path_factory.mktemp("policy")
    save_policy(model, tokenizer, out)
    return out


def damage(path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if how == "truncated" else b"\x00not weights" * 100)


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_damaged_saved_policy_is_named_in_one_line(saved, tmp_path, how):
    import shutil

    from bench.models.policy import load_policy

    policy = tmp_path / "policy"
    shutil.copytree(saved, policy)
    damage(policy / "model.safetensors", how)
    with pytest.raises(CreditBenchError) as e:
        load_policy(policy)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"cannot load model {str(policy)!r}: its weights file is damaged")


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_damaged_base_checkpoint_is_named_in_one_line(saved, tmp_path, how):
    import shutil

    from bench.bases import bases

    base = tmp_path / "base" / "arithmetic" / "tiny-500k-0123456789ab"
    shutil.copytree(saved, base)
    assert len(bases.weights_sha256(base)) == 64
    damage(base / "model.safetensors", how)
    with pytest.raises(CreditBenchError) as e:
        bases.verify(base)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"base checkpoint {base}: model.safetensors is damaged")
    assert f"rm -r {base}" in msg


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
def test_a_damaged_resume_checkpoint_is_named_before_the_run_starts(tmp_path, how):
    import mlflow

    from bench.engine.checkpoint import resume_point

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id  # RUNNING: a killed run
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "run.json").write_text(json.dumps({"mlflow_run_id": run_id}))
    torch.save({"state_dict": {"w": torch.zeros(64, 64)}}, ckpt / "last.ckpt")
    cfg = RunConfig(tracking=TrackingConfig(uri=uri))
    assert resume_point(cfg, ckpt, client, log=print) == (run_id, ckpt / "last.ckpt")  # a sound one resumes
    damage(ckpt / "last.ckpt", how)
    with pytest.raises(CreditBenchError) as e:
        resume_point(cfg, ckpt, client, log=print)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"checkpoint {ckpt / 'last.ckpt'} is damaged")
    assert (ckpt / "last.ckpt").exists() and (ckpt / "run.json").exists()  # nothing deleted for the user
