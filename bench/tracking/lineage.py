"""What a run started from, recorded in MLflow: the task data it trained and was evaluated on (as
dataset inputs) and the warm-start run that built its base checkpoint."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
import warnings
from pathlib import Path

SCHEMA_ROWS = 1000
"""Rows a dataset input's schema is inferred from (a task's columns have one type each; MLflow's own
inference walks every value of every row, seconds on a 200,000-row train split)."""

_ENTITIES: dict[tuple, object] = {}
"""The dataset entities this process has built, by task, split, source and content fingerprint: a
worker's runs of one task log the same inputs, built once."""


def log_task_data(logger, task_name: str, task, split: str, rows, context: str) -> None:
    """The task's ``split`` as a dataset input of the run (the UI's *Datasets used*; the rows
    themselves are not copied): its name, version, where it comes from (the Hub dataset, the local
    file of a data directory, or the task's generator and options), schema, row count and digest.
    ``context`` is ``training`` or ``evaluation``."""
    import mlflow.data
    from mlflow.entities import DatasetInput, InputTag

    source = getattr(task, "sources", {}).get(split)  # a task read from data files (tasks/data.py Source)
    local = getattr(task.config, "data_dir", None) or os.environ.get("CREDITBENCH_DATA")
    if source is None:
        from mlflow.data.code_dataset_source import CodeDatasetSource

        config = json.dumps(dataclasses.asdict(task.config), sort_keys=True, default=str)
        origin = CodeDatasetSource({"task": task_name, "version": task.VERSION, "split": split, "config": config})
    elif local:  # MLflow makes a local-file source of a path
        origin = str(Path(local).expanduser() / source.local)
    else:
        from mlflow.data.huggingface_dataset_source import HuggingFaceDatasetSource

        origin = HuggingFaceDatasetSource(source.hub, config_name=source.hub_config, split=source.hub_split)
    fingerprint = getattr(rows, "_fingerprint", None)  # the content's: rows without one are built each time
    where = origin if isinstance(origin, str) else origin.to_json()  # a source object's repr names its address
    key = (task_name, task.VERSION, split, where, fingerprint, len(rows))
    entity = _ENTITIES.get(key) if fingerprint else None
    if entity is None:
        with warnings.catch_warnings():  # MLflow registers its local-file source twice and says so for every path
            warnings.simplefilter("ignore", UserWarning)
            frame = rows.to_pandas()
            dataset = mlflow.data.from_pandas(frame, source=origin, name=f"{task_name}-v{task.VERSION}-{split}")
        _sampled_schema(dataset, frame)
        entity = dataset._to_mlflow_entity()
        if fingerprint:
            if len(_ENTITIES) >= 16:
                _ENTITIES.clear()
            _ENTITIES[key] = entity
    tags = [InputTag("mlflow.data.context", context)]
    for attempt in range(3):
        try:
            logger.experiment.log_inputs(logger.run_id, datasets=[DatasetInput(entity, tags)])
            return
        except Exception as e:  # two runs adding the same dataset at once: one insert wins, the other links it
            raced = "UNIQUE constraint" in str(e) or "duplicate key" in str(e)  # SQLite's, PostgreSQL's words
            if not raced or attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))


def _sampled_schema(dataset, frame) -> None:
    """Give ``dataset`` the schema of its first SCHEMA_ROWS rows before MLflow infers one from all of
    them (PandasDataset.schema is a cached property; another kind of dataset keeps its own)."""
    import inspect

    if len(frame) <= SCHEMA_ROWS or not isinstance(
        inspect.getattr_static(type(dataset), "schema", None), functools.cached_property
    ):
        return
    from mlflow.types.utils import _infer_schema

    try:
        vars(dataset)["schema"] = _infer_schema(frame.head(SCHEMA_ROWS))
    except Exception:  # MLflow infers it itself
        pass


def link_warmstart(logger, base: Path) -> None:
    """Point the run at the warm-start run that built its base checkpoint ``base``: the tags
    ``warmstart_run_id`` and ``base_checkpoint``, and, when that run is in this store, a link to it
    in the run's description (the warm-start cache is shared by every store, its run is not)."""
    info = json.loads((base / "warmstart.json").read_text())
    client, rid = logger.experiment, info["mlflow_run_id"]
    client.set_tag(logger.run_id, "warmstart_run_id", rid)
    client.set_tag(logger.run_id, "base_checkpoint", str(base))
    try:
        eid = client.get_run(rid).info.experiment_id
    except Exception:  # built against another store
        return
    note = f"Starts from the base checkpoint of the warm-start run [{rid}](#/experiments/{eid}/runs/{rid})."
    client.set_tag(logger.run_id, "mlflow.note.content", note)


def record_lineage(logger, task_name: str, task, data, eval_tasks: dict, base: Path | None) -> None:
    """A new RL run's inputs: the rows of the data module ``data`` (bench.engine.data) it trains on
    and evaluates on (the training task's train split; each evaluated task's eval problems), and the
    warm-start behind ``base`` (None: the model was not warm-started here)."""
    data.setup()  # loads the splits once: the trainer's own setup then finds them loaded
    log_task_data(logger, task_name, task, "train", data.train_rows, "training")
    for (name, t), rows in zip(eval_tasks.items(), data.eval_sets):
        log_task_data(logger, name, t, "eval", rows, "evaluation")
    if base is not None:
        link_warmstart(logger, base)
