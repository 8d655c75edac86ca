"""Same numbers on every machine: the pinned CPU numerics, the pinned base checkpoints, the warm-start's
stopping rule across a sharp transition, and the numerics fingerprint each run and report carries
(the reproduction check that compares them: tests/reproduce/test_agreement.py). docs/reproducibility.md."""

from __future__ import annotations

import copy
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bases import bases
from bench.bases.warmstart import closest, partial_step, replay_window
from bench.errors import CreditBenchError

REPO = Path(__file__).resolve().parents[2]


def _probe(env: dict[str, str]) -> str:
    code = "import bench, torch; print(torch.backends.cpu.get_cpu_capability())"
    clean = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    out = subprocess.run([sys.executable, "-c", code], env=clean | env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the pins are x86-64 code paths")
def test_importing_bench_pins_the_avx2_code_paths_unless_told_native():
    from bench.environment.fingerprint import hardware_capability

    assert _probe({}) == "AVX2"
    native = _probe({"CREDITBENCH_NUMERICS": "native"})
    assert native == hardware_capability()  # what the CPU has: AVX512 or AVX2


def test_a_run_and_a_report_carry_the_numerics_fingerprint():
    from bench.environment.fingerprint import common, describe, fingerprint

    fp = fingerprint(1)
    assert fp["numerics"]["threads"] == 1 and fp["numerics"]["torch"] and fp["numerics"]["transformers"]
    assert common([fp, copy.deepcopy(fp)]) == fp
    other = copy.deepcopy(fp)
    other["numerics"]["transformers"] = "0.0"
    assert common([fp, other])["mixed"] == ["numerics.transformers"]
    assert "thread(s)" in describe(fp) and "\n" not in describe(fp)


# --- pinned base checkpoints ---------------------------------------------------------------------


def _base(cache: Path, task: str = "chain", name: str = "tiny-500k-abc") -> Path:
    from bench.models.policy import build_tiny

    out = cache / "base" / task / name
    model, tok = build_tiny("tiny-500k", seed=0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "warmstart.json").write_text(json.dumps({"steps": 10, "check_accuracy": 0.25}))
    return out


def test_a_base_whose_weights_differ_from_its_pin_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    root, out = tmp_path / "pinned", _base(tmp_path / "cache")
    root.mkdir()
    entry = bases.pin(out, root)
    assert bases.verify(out, root) == entry["weights_sha256"]
    weights = load_file(out / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += 1e-6  # one float, one ulp or so: a different base
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CreditBenchError, match="differs from its pin") as e:
        bases.verify(out, root)
    assert "\n" not in str(e.value) and f"rm -r {out}" in str(e.value)


def test_the_pinned_copy_is_installed_and_checked(tmp_path):
    root, built = tmp_path / "pinned", _base(tmp_path / "built")
    root.mkdir()
    bases.pin(built, root)
    out = tmp_path / "cache" / "base" / "chain" / "tiny-500k-abc"
    out.parent.mkdir(parents=True)
    assert bases.install(out, root) and (out / "warmstart.json").is_file()
    assert bases.weights_sha256(out) == bases.weights_sha256(built)
    # a damaged pinned copy is not installed
    (root / "chain" / "tiny-500k-abc" / "model.safetensors").write_bytes(
        (built / "model.safetensors").read_bytes()[:-8] + b"\0" * 8
    )
    out2 = tmp_path / "cache2" / "base" / "chain" / "tiny-500k-abc"
    out2.parent.mkdir(parents=True)
    with pytest.raises(CreditBenchError, match="does not match its own pin"):
        bases.install(out2, root)
    assert not out2.exists() and not out2.with_name(out2.name + ".tmp").exists()
    # pinning a folder that is not a built base: one line, nothing written
    with pytest.raises(CreditBenchError, match="not a built base checkpoint"):
        bases.pin(tmp_path / "nowhere", root)
    assert sorted(bases.pins(root)) == ["chain/tiny-500k-abc"]
    # no pin for a key: nothing installed (the warm-start builds it)
    assert not bases.install(tmp_path / "cache" / "base" / "chain" / "tiny-2m-zzz", root)


def test_the_committed_pinned_bases_match_their_digests():
    manifest = bases.pins()
    assert manifest, "results/bases/bases.json pins the committed results' bases"
    for key, entry in manifest.items():
        assert bases.weights_sha256(bases.PINNED / key) == entry["weights_sha256"], key
        info = json.loads((bases.PINNED / key / "warmstart.json").read_text())
        assert abs(info["check_accuracy"] - info["target_accuracy"]) <= 0.02, key


def test_the_embedded_configs_bases_are_pinned():
    """Every task of the committed sweeps starts from a pinned base (their cache keys are pinned)."""
    from bench.bases.warmstart import base_dir
    from bench.config import WarmStartConfig
    from bench.registry import TASKS

    for name in ("chain", "arithmetic"):
        task = TASKS.get(name)()
        assert bases.key_of(base_dir("c", name, task, "tiny-500k", WarmStartConfig())) in bases.pins(), name


# --- the warm-start's rule across a sharp transition ----------------------------------------------


def _sharp(step: int) -> float:
    """A transition like chain's on an AVX-512 CPU: 0.09 at step 625, 0.68 at 650, ~0.024 a step."""
    return 0.09 if step <= 625 else min(0.68, 0.09 + 0.0236 * (step - 625))


def test_a_jump_past_the_target_is_replayed_step_by_step_and_lands_within_tolerance():
    target, tol = 0.25, 0.02
    coarse = {s: _sharp(s) for s in range(25, 651, 25)}  # first pass: stops at the first check >= target
    window = replay_window(coarse, target, tol)
    assert window == range(625, 651)
    dense = {s: _sharp(s) for s in window if s == window.start or _sharp(s - 1) < target}
    best = closest(coarse | dense, target)
    assert abs(_sharp(best) - target) <= tol and 625 < best < 650


def test_a_jump_within_one_step_is_bisected_into_a_partial_step():
    """Chain's transition on the pinned CPU paths: 0.21 at step 751, 0.33 at 752. The base takes a
    fraction a of step 752: accuracy here is a steep ramp in a, 0.25 at a = 0.425, ±0.02 over ±0.01."""
    import torch

    class Probe:
        model = torch.nn.Linear(1, 1, bias=False)

        def accuracy(self) -> float:
            a = self.model.weight.item()  # the weight walks from 0 (before) to 1 (after)
            return min(0.4, max(0.2, 0.2 + (a - 0.4) * 2))

    before, after = {"weight": torch.zeros(1, 1)}, {"weight": torch.ones(1, 1)}
    fraction, acc, weights = partial_step(Probe(), before, after, target=0.25, tolerance=0.02)
    assert abs(acc - 0.25) <= 0.02 and 0.41 < fraction < 0.44
    assert torch.equal(weights["weight"], torch.full((1, 1), fraction))


def test_no_replay_when_a_check_lands_within_tolerance_or_the_target_is_never_reached():
    assert replay_window({25: 0.1, 50: 0.26}, 0.25, 0.02) is None
    assert replay_window({25: 0.1, 50: 0.2}, 0.25, 0.02) is None  # max_steps: the closest check is the base
    assert closest({25: 0.1, 50: 0.2}, 0.25) == 50
    assert replay_window({25: 0.9}, 0.25, 0.02) == range(1, 26)  # past it at the first check: from the start
