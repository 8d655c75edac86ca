"""Where a run's checkpoints live: ``<checkpoint.dir>/<run name>-<config hash>/`` (what it holds:
:mod:`bench.engine.checkpoint`). Apart from that module, which needs torch and Lightning, so that a
sweep's own process finds a run's folder (bench.sweep.launch) without importing them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from bench.models.policy import sized


def config_hash(cfg) -> str:
    """What makes two runs the same run: every field of the config but where things are written
    and how fast (tracking, checkpoint, threads, the micro-batch token budget). The tracking URI
    and experiment stay in: a run resumes into a run of the same store."""
    d = identity(cfg, ("uri", "experiment", "run_name", "sweep"))
    d.pop("threads", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


LATER = {"old_logprobs": "rescore", "packed_update": False}
"""RL options added after runs were committed, with what those runs did: an option at that value is
left out of a run's identity, so a run made before it existed keeps its identity and one made
otherwise is another run."""


def identity(cfg, tracking: tuple[str, ...]) -> dict:
    """The config as a dict, less what does not change a run's results: the checkpoint settings, the
    tracking settings but ``tracking``, the micro-batch token budget and the LM head's chunks (the same
    to float precision), and the :data:`LATER` options at their earlier values."""
    d = dataclasses.asdict(cfg)
    d["tracking"] = {k: v for k, v in d["tracking"].items() if k in tracking}
    d.pop("checkpoint", None)
    d["rl"].pop("micro_batch_tokens", None)
    d["rl"].pop("lm_head_chunk_elements", None)
    for key, before in LATER.items():
        if d["rl"].get(key) == before:
            d["rl"].pop(key)
    if d["warmstart"]["lr"] is None and sized(cfg.warmstart, cfg.model.name).lr == 1e-3:
        d["warmstart"]["lr"] = 1e-3  # null (the size's rate) since tiny-8m's; where it is 1e-3: the run it was
    if not d["method"].get("oracle", False):  # added later too: a run without the oracle is the run it was
        d["method"].pop("oracle", None)
        d["method"].pop("oracle_rollouts", None)
    return d


def run_dir(cfg, run_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_name)
    return Path(cfg.checkpoint.dir).expanduser() / f"{safe}-{config_hash(cfg)}"
