"""The committed probes (results/probes/): the validation is new data, not a replay of the main probe."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _probe(name: str) -> dict:
    return json.loads((ROOT / "results/probes" / name / "updates.json").read_text())


def test_the_validation_shares_no_batch_and_no_trajectory_with_the_probe():
    """Its own probe seed and its own reference trajectories: no batch it trained on (a batch's digest of
    samples, rewards and groups) is one the flagship's probe trained on."""
    main, validation = _probe("embedded"), _probe("embedded-validation")
    o, v = main["plan"]["options"], validation["plan"]["options"]
    assert o["seed"] != v["seed"]
    assert not {c["seed"] for c in main["checkpoints"]} & {c["seed"] for c in validation["checkpoints"]}
    prints = {r["fingerprint"] for r in main["updates"]}
    assert prints and not prints & {r["fingerprint"] for r in validation["updates"]}
