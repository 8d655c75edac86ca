"""MLflow tracking: loggers, tags, params and artifacts for every run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if dataclasses.is_dataclass(d):
        d = dataclasses.asdict(d)
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def make_logger(uri: str, experiment: str, run_name: str, tags: dict[str, str]):
    """A Lightning MLFlowLogger on ``uri``; fails early, with one line, if the store is unusable."""
    from lightning.pytorch.loggers import MLFlowLogger

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    logger = MLFlowLogger(experiment_name=experiment, run_name=run_name, tracking_uri=uri, tags=tags,
                          synchronous=True)  # every metric is in the store when the call returns
    try:
        _ = logger.run_id  # creates the experiment and the run
    except Exception as e:  # mlflow raises many types for an unusable store
        raise CreditBenchError(f"cannot use MLflow tracking URI {uri!r}: {str(e).splitlines()[0][:300]}") from None
    return logger


def log_config(logger, params: dict[str, Any], yaml_text: str, name: str = "config.yaml") -> None:
    logger.log_hyperparams({k: ("" if v is None else v) for k, v in params.items()})
    logger.experiment.log_text(logger.run_id, yaml_text, name)
