"""A sweep's runs in the MLflow store: its parent run (found, opened, ended), the runs an
interrupted attempt left behind (deleted), whether a run finished, and the report's files logged to
the parent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.tracking.tracking import experiment_id


def sweep_run(client, experiment: str, sweep: str) -> str | None:
    """The id of the sweep's parent run in the experiment named ``experiment`` (the latest), or None."""
    exp = client.get_experiment_by_name(experiment)
    found = exp and client.search_runs(
        [exp.experiment_id],
        f"tags.kind = 'sweep' and tags.sweep = '{sweep}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return found[0].info.run_id if found else None


def open_sweep_run(
    client,
    experiment: str,
    sweep: str,
    tags: dict[str, str],
    params: dict[str, Any],
    spec_text: str,
    run_id: str | None = None,
) -> str:
    """The sweep's parent run, RUNNING: ``run_id`` (the one its results folder records, see
    bench.tracking.stores) or else the latest of the sweep's name, its tags refreshed, or a new one with
    ``params``; the spec is logged to it as sweep.yaml."""
    run_id = run_id or sweep_run(client, experiment, sweep)
    if run_id is not None:
        client.update_run(run_id, status="RUNNING")
        for k, v in tags.items():
            client.set_tag(run_id, k, v)
    else:
        run_id = client.create_run(experiment_id(client, experiment), run_name=sweep, tags=tags).info.run_id
        for k, v in params.items():
            client.log_param(run_id, k, v)
    client.log_text(run_id, spec_text, "sweep.yaml")
    return run_id


def is_finished(client, run_id: str) -> bool:
    """Whether the run exists, ended FINISHED and is not deleted."""
    try:
        run = client.get_run(run_id)
    except Exception:  # not in this store
        return False
    return run.info.status == "FINISHED" and run.info.lifecycle_stage == "active"


def delete_sweep_runs(client, experiment: str, sweep: str, key: str, keep: str | None = None) -> None:
    """Delete the runs of the sweep's run ``key`` in ``experiment`` but ``keep``."""
    for run in client.search_runs(
        [experiment_id(client, experiment)], f"tags.sweep = '{sweep}' and tags.run_key = '{key}'"
    ):
        if run.info.run_id != keep:
            client.delete_run(run.info.run_id)


def report_files(out: Path) -> list[Path]:
    """The report files of a sweep's folder (not the per-run configs, logs and results)."""
    return [p for p in sorted(out.iterdir()) if p.is_file() and not p.name.startswith(".")]


def log_files(client, run_id: str, paths: list[Path], artifact_path: str) -> None:
    for path in paths:
        client.log_artifact(run_id, str(path), artifact_path=artifact_path)


def end_run(client, run_id: str, metrics: dict[str, float], status: str) -> None:
    """Log the run's last ``metrics`` and mark it ended with ``status``."""
    for k, v in metrics.items():
        client.log_metric(run_id, k, v)
    client.set_terminated(run_id, status)
