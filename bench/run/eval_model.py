"""What an evaluation's ``--model`` names: a saved model directory, a Hugging Face Hub id (offline: one
in the local cache), or the MLflow run id of a training run -- its config (whose settings are the
evaluation's defaults) and its saved policy (bench/run/evaluate.py evaluates it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError
from bench.run.args import first_line

MODELS = (
    "a saved model directory, the MLflow run id of a training run (its saved policy), or a Hugging Face "
    "Hub id (with HF_HUB_OFFLINE set: one in the local Hub cache)"
)
"""What ``--model`` takes, for its errors (a tiny size is not a checkpoint: eval refuses it)."""


def check_offline_hub_id(model: str) -> None:
    """Offline (HF_HUB_OFFLINE), a Hub id must be in the local cache: refused here, before the data,
    the tracking store and the sampling, rather than when its weights fail to load."""
    from huggingface_hub import constants, try_to_load_from_cache

    if not constants.HF_HUB_OFFLINE or Path(model).expanduser().is_dir():
        return
    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        raise CreditBenchError(f"--model {model!r} is neither a directory nor a Hub id: give {MODELS}") from None
    if not isinstance(cached, str):
        raise CreditBenchError(
            f"--model {model!r} is not in the local Hugging Face cache and the Hub is offline (HF_HUB_OFFLINE): "
            f"give {MODELS}"
        )


@dataclass
class TrainingRun:
    """A training run whose saved policy is evaluated: its id, name and config (None when the run
    logged none)."""

    run_id: str
    name: str
    cfg: Any
    policy_dir: str | None = None  # where the run saved its policy on this machine (tag policy_dir)


def training_run(run_id: str, uri: str) -> TrainingRun:
    """The training run ``run_id`` of the store at ``uri``, with the run config it logged (config.yaml)."""
    import tempfile

    import yaml

    from bench.run.args import run_config
    from bench.tracking.tracking import check_tracking_uri, client

    check_tracking_uri(uri)
    c = client(uri)
    try:
        run = c.get_run(run_id)
    except Exception as e:  # mlflow: no such run in this store
        raise CreditBenchError(f"--model {run_id}: no MLflow run with that id in {uri} ({first_line(e)})") from None
    cfg = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            text = Path(c.download_artifacts(run_id, "config.yaml", tmp)).read_text()
        except Exception:  # a run logged without its config: the flags and DEFAULTS decide
            text = None
        if text is not None:
            cfg = run_config(yaml.safe_load(text), f"--model {run_id}: its config.yaml")
    return TrainingRun(run_id, run.info.run_name, cfg, run.data.tags.get("policy_dir"))


def run_policy(training: TrainingRun, uri: str) -> str:
    """The policy a training run saved: its ``policy_dir`` where that still exists, else the run's
    ``policy/`` artifact downloaded from the tracking store."""
    import mlflow

    if training.policy_dir and Path(training.policy_dir).is_dir():
        return training.policy_dir
    try:
        return mlflow.artifacts.download_artifacts(run_id=training.run_id, artifact_path="policy", tracking_uri=uri)
    except Exception as e:
        raise CreditBenchError(
            f"--model {training.run_id}: the run saved no policy (train with checkpoint.policy: true) ({first_line(e)})"
        ) from None
