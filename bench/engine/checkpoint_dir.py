"""Where a run's checkpoints live: ``<checkpoint.dir>/<run name>-<config hash>/`` (what it holds:
:mod:`bench.engine.checkpoint`). Apart from that module, which needs torch and Lightning, so that a
sweep's own process finds a run's folder (bench.sweep.launch) without importing them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path


def config_hash(cfg) -> str:
    """What makes two runs the same run: every field of the config but where things are written
    and how fast (tracking, checkpoint, threads, the micro-batch token budget). The tracking URI
    and experiment stay in: a run resumes into a run of the same store."""
    d = dataclasses.asdict(cfg)
    d["tracking"] = {k: v for k, v in d["tracking"].items() if k in ("uri", "experiment", "run_name", "sweep")}
    d.pop("checkpoint", None)
    d.pop("threads", None)
    d["rl"].pop("micro_batch_tokens", None)  # the same update to float precision, in less memory
    d["rl"].pop("lm_head_chunk_elements", None)  # nor the LM head's chunks (the same to float precision)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_dir(cfg, run_name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_name)
    return Path(cfg.checkpoint.dir).expanduser() / f"{safe}-{config_hash(cfg)}"
